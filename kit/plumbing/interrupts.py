"""Signals as interrupts, and holding them while something must finish: no Ctrl-C, SIGTERM or SIGHUP may cut
short the stopping of a server (a second one would leave it running) or the signing of a bundle.

One handler serves SIGINT, SIGTERM and SIGHUP while any block is in force, and a stack of blocks decides what a
signal does: in an ``interruptible`` stretch it raises KeyboardInterrupt, in a ``deferred_interrupts`` hold it is
collected. Entering or leaving a block is one step on that stack, never a swap of handlers, so a storm of signals
finds no moment between two states (review, clean clones: an interrupt landing while a block restored its
handlers escaped the hold around it and cut the run's outcome short).

- A stretch is interrupted once: the first signal raises and marks the stretch, and every block under it,
  fired; later ones are collected and dropped, so that an interrupt in flight is never replaced by another one
  halfway through the cleanups it runs.
- A hold re-delivers what it collected when it ends, as a KeyboardInterrupt, unless it sits in a stretch that
  was interrupted already, or in another hold (which then collects it).
- A signal ignored when the outermost block begins (``cmd &`` starts with SIGINT ignored, ``nohup`` with SIGHUP)
  stays ignored.
- The handlers of old are back when the outermost block ends, or with ``then_ignore`` the signals are then
  ignored (the command is done: a storm cannot cut its final message or exit code short).

Blocks only act on the main thread (the only one signal handlers run on)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(eq=False)
class _Block:
    raises: bool  # an interruptible stretch (a signal raises) or a hold (it is collected)
    pending: list[int] = field(default_factory=list)
    fired: bool = False  # interrupted already (or the work it would stop has ended): later signals are collected


_stack: list[_Block] = []
_saved: dict[int, Any] = {}  # the handlers before the outermost block
_then_ignore: list[bool] = [False]  # the outermost block's wish for when it ends


def on_main_thread() -> bool:
    """Signal handlers can only be set from the main thread (tests run the loop elsewhere too)."""
    return threading.current_thread() is threading.main_thread()


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if not _stack:
        return  # the outermost block is ending: the command is done
    top = _stack[-1]
    if top.raises and not top.fired:
        top.fired = True  # first, in one step: a signal landing from here on is collected
        for b in _stack:
            b.fired = True
        raise KeyboardInterrupt
    top.pending.append(signum)


@contextlib.contextmanager
def _in_force(b: _Block, *, then_ignore: bool = False, before_leaving: Callable[[], None] | None = None
              ) -> Iterator[_Block]:
    """``b`` on the stack for the block. Every step that changes what a signal does is one step on the stack,
    taken inside the ``try``: an interrupt can land before or after it, never halfway."""
    try:
        if not _stack:
            _then_ignore[0] = then_ignore
            _stack.append(b)
            _saved.clear()
            for sig in HELD:
                old = signal.getsignal(sig)
                if old != signal.SIG_IGN:
                    _saved[sig] = old
                    signal.signal(sig, _on_signal)
        else:
            _stack.append(b)
        yield b
    finally:
        if before_leaving is not None:
            before_leaving()  # while ``b`` is still on top
        try:
            _stack.remove(b)  # by identity (eq=False); absent if the try was cut short before the append
        except ValueError:
            pass
        if not _stack:  # the outermost block: a signal now finds an empty stack and is ignored
            for signum, handler in _saved.items():
                signal.signal(signum, signal.SIG_IGN if _then_ignore[0] else handler)
            _saved.clear()


@contextlib.contextmanager
def interruptible(*, then_ignore: bool = False) -> Iterator[None]:
    """A stretch where SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt (the first one; the rest are dropped),
    also inside a hold (``deferred_interrupts``): the holds nested in it hold, and re-deliver, on their own.
    ``then_ignore`` (a command's outermost block): once it is left, the signals are ignored."""
    if not on_main_thread():
        yield
        return
    with _in_force(_Block(raises=True), then_ignore=then_ignore):
        yield


@contextlib.contextmanager
def deferred_interrupts(*, drop: bool = False) -> Iterator[list[int]]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block; the signals that arrived are re-delivered (as
    KeyboardInterrupt) once it is done, or with ``drop`` forgotten, and the stretches around it take no more
    interrupts (the block ends the work they would stop: a run saying its outcome). A block inside another
    hands what it collected to the outer one, which re-delivers it when it is done (an inner re-delivery
    would cut the outer short)."""
    if not on_main_thread():
        yield []
        return
    b = _Block(raises=False)

    def ended() -> None:
        for outer in _stack:  # b is still on top: a signal meanwhile is collected by it
            outer.fired = True

    with _in_force(b, before_leaving=ended if drop else None):
        yield b.pending
    if drop or not b.pending:
        return
    below = _stack[-1] if _stack else None
    if below is not None and not below.raises:
        below.pending.extend(b.pending)
    elif below is None or not below.fired:
        for outer in _stack:
            outer.fired = True
        raise KeyboardInterrupt
