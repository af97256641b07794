"""The bundle directory's lock: a kit run or resume holds it exclusively for as long as it writes the bundle
(``kit.experiment.session.lock``); a reader that must not see the bundle half-written (`kit archive`) holds it
shared, and `kit verify` asks whether a run is writing it now. Never waits."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from kit.plumbing.files import NOFOLLOW


@contextlib.contextmanager
def shared(root: Path) -> Iterator[bool]:
    """The lock of ``root``, held shared while the caller reads it: yields True, or False (holding nothing) when a
    kit run or resume holds it. OSError when the directory cannot be opened (a symbolic link is refused)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            free = True
        except BlockingIOError:
            free = False
        yield free
    finally:
        os.close(fd)


def in_use(root: Path) -> bool:
    """Whether a kit run or resume is writing ``root`` now (False where the directory cannot be opened to tell)."""
    try:
        with shared(root) as free:
            return not free
    except OSError:
        return False
