"""Signals during a run: SIGTERM and SIGHUP end it like Ctrl-C, and no signal interrupts the stopping of
a server or the signing of the bundle (``deferred_interrupts``, from ``kit.plumbing.interrupts``)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType

from kit.plumbing.interrupts import deferred_interrupts, hold_lifted, on_main_thread

__all__ = ["deferred_interrupts", "on_main_thread", "signals_as_interrupts"]

# `cmd &` in a non-interactive shell starts kit with SIGINT ignored (Python then keeps it so): kit keeps it so too
_SIGINT_IGNORED = signal.getsignal(signal.SIGINT) == signal.SIG_IGN


@contextlib.contextmanager
def signals_as_interrupts(*, then_ignore: bool = False) -> Iterator[None]:
    """SIGTERM and SIGHUP (a closed terminal, `kill`, a batch system's cancel) end the run the way Ctrl-C
    does: the server is stopped and the bundle signed. ``then_ignore`` (a command's outermost block): once it is
    left, SIGINT, SIGTERM and SIGHUP are ignored, so that a storm of them cannot cut the final message and exit
    code short (the default handlers ended kit with 143, or a traceback, after its work was done)."""
    if not on_main_thread():
        yield
        return

    def interrupt(signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    old = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    if not _SIGINT_IGNORED:  # held by an outer block: not here (a process started with it ignored keeps that)
        old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with hold_lifted():
            yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, signal.SIG_IGN if then_ignore else handler)
