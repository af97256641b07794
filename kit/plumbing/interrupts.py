"""Holding interrupts while something must finish: no Ctrl-C, SIGTERM or SIGHUP may cut short the stopping of
a server (a second one would leave it running) or the signing of a bundle. The run itself turns SIGTERM and
SIGHUP into KeyboardInterrupt (``kit.experiment.signals``)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def on_main_thread() -> bool:
    """Signal handlers can only be set from the main thread (tests run the loop elsewhere too)."""
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[list[int]]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block; the signals that arrived are re-delivered (as
    KeyboardInterrupt) once it is done."""
    pending: list[int] = []
    if not on_main_thread():
        yield pending
        return
    old = {sig: signal.getsignal(sig) for sig in HELD}
    for sig in old:
        signal.signal(sig, lambda n, _f: pending.append(n))
    try:
        yield pending
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt
