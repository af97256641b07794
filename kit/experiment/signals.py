"""Signals during a run: SIGTERM and SIGHUP end it like Ctrl-C, and no signal interrupts the stopping of
a server or the signing of the bundle (``kit.plumbing.interrupts``: one handler, a stack of blocks)."""

from __future__ import annotations

from kit.plumbing.interrupts import deferred_interrupts, on_main_thread
from kit.plumbing.interrupts import interruptible as signals_as_interrupts

__all__ = ["deferred_interrupts", "on_main_thread", "signals_as_interrupts"]
