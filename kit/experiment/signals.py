"""Signals during a run: SIGTERM and SIGHUP end it like Ctrl-C, and no signal interrupts the stopping of
a server or the signing of the bundle."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType


def on_main_thread() -> bool:
    """Signal handlers can only be set from the main thread (tests run the loop elsewhere too)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM while a server is being stopped: a second Ctrl-C must not leave it running.
    The signals that arrived are re-delivered (as KeyboardInterrupt) once the block is done."""
    pending: list[int] = []
    if not on_main_thread():
        yield pending
        return
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in old:
        signal.signal(sig, lambda n, _f: pending.append(n))
    try:
        yield pending
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt


@contextlib.contextmanager
def signals_as_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a batch system's cancel) end the run the way Ctrl-C
    does: the server is stopped and the bundle signed."""
    if not on_main_thread():
        yield
        return

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
