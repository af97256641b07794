"""Holding interrupts while something must finish: no Ctrl-C, SIGTERM or SIGHUP may cut short the stopping of
a server (a second one would leave it running) or the signing of a bundle. The run itself turns SIGTERM and
SIGHUP into KeyboardInterrupt (``kit.experiment.signals``)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_holding: list[list[int]] = []  # the pending lists of the blocks in force (the outermost one collects)


def on_main_thread() -> bool:
    """Signal handlers can only be set from the main thread (tests run the loop elsewhere too)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred_interrupts(*, drop: bool = False) -> Iterator[list[int]]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block; the signals that arrived are re-delivered (as
    KeyboardInterrupt) once it is done, or with ``drop`` forgotten (the block ends the work they would stop). A
    block inside another holds nothing of its own: the outer one collects the signals and re-delivers them when it
    is done (an inner re-delivery would cut the outer short)."""
    if not on_main_thread() or _holding:
        yield _holding[0] if _holding else []
        return
    pending: list[int] = []
    old = {sig: signal.getsignal(sig) for sig in HELD}
    for sig in old:
        signal.signal(sig, lambda n, _f: pending.append(n))
    _holding.append(pending)
    try:
        yield pending
    finally:
        # By identity, never a bare pop: a KeyboardInterrupt raised at the first step of hold_lifted's finally
        # (a SIGTERM storm) skips its restore and leaves _holding empty (seen: "IndexError: pop from empty list").
        _holding[:] = [p for p in _holding if p is not pending]
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if pending and not drop:
        raise KeyboardInterrupt


@contextlib.contextmanager
def hold_lifted() -> Iterator[None]:
    """Inside a ``deferred_interrupts`` block, a stretch where interrupts are delivered again (the caller installs
    handlers that raise): the blocks nested in it hold (and re-deliver) on their own, as they would with no block
    around; the outer block's hold (its pending list and handlers) is back when the stretch ends."""
    saved = _holding[:]
    _holding.clear()
    try:
        yield
    finally:
        _holding[:] = saved
