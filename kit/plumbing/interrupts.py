"""Signals as interrupts, and holding them while something must finish: no Ctrl-C, SIGTERM or SIGHUP may cut
short the stopping of a server (a second one would leave it running) or the signing of a bundle.

One handler serves SIGINT, SIGTERM and SIGHUP while any block is in force, and a stack of blocks decides what a
signal does: in an ``interruptible`` stretch it raises KeyboardInterrupt, in a ``deferred_interrupts`` hold it is
collected. Entering or leaving a block is one step on that stack, never a swap of handlers, so a storm of signals
finds no moment between two states (review, clean clones: an interrupt landing while a block restored its
handlers escaped the hold around it and cut the run's outcome short).

- A stretch is interrupted once while that interrupt is in flight: the first signal raises and marks the stretch,
  and every block under it, fired; later ones are collected and dropped while anything still holds that
  interrupt (it unwinds, or a cleanup keeps it to raise after stopping the rest), so that none replaces it
  halfway through the cleanups it runs. Once it is gone (a signal handled in a ``__del__`` is only printed, then
  dropped; code that caught it went on), a new signal raises again.
- A hold re-delivers what it collected when it ends, as a KeyboardInterrupt, under the same rule, or hands it to
  the hold around it. A stretch entered in a hold that has collected a signal is interrupted at once (the signal
  came between the two).
- A dropping hold (``drop``: a run saying its outcome) marks the stretches around it done: they take no more
  interrupts (a caller's work after it that must stay interruptible opens a stretch of its own).
- Leaving a block cuts the stack back to where it stood: a block whose exit an interrupt skipped (one landing in
  contextlib's ``__enter__`` or ``__exit__``, around the generator's own steps) is removed by the block around it.
- A signal ignored when the outermost block begins (``cmd &`` starts with SIGINT ignored, ``nohup`` with SIGHUP)
  stays ignored.
- The handlers of old are back when the outermost block ends, or with ``then_ignore`` the signals are then
  ignored (the command is done: a storm cannot cut its final message or exit code short).

Blocks only act on the main thread (the only one signal handlers run on)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, NoReturn

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(eq=False)
class _Block:
    raises: bool  # an interruptible stretch (a signal raises) or a hold (it is collected)
    pending: list[int] = field(default_factory=list)
    fired: bool = False  # interrupted already: signals while that interrupt's cleanups run are collected
    done: bool = False  # the work it would stop has ended (a dropping hold inside it ended): signals are collected


_stack: list[_Block] = []
_saved: dict[int, Any] = {}  # the handlers before the outermost block
_then_ignore: list[bool] = [False]  # the outermost block's wish for when it ends


def on_main_thread() -> bool:
    """Signal handlers can only be set from the main thread (tests run the loop elsewhere too)."""
    return threading.current_thread() is threading.main_thread()


class _Interrupt(KeyboardInterrupt):
    """The KeyboardInterrupt a signal raises: an object of its own, so that whether it is still held is known."""


_in_flight: list[weakref.ref[_Interrupt] | None] = [None]  # the last interrupt raised, while anything holds it


def _raises(b: _Block) -> bool:
    """Whether a signal now interrupts the stretch ``b``."""
    flying = _in_flight[0] is not None and _in_flight[0]() is not None
    return b.raises and not b.done and not (b.fired and flying)


def _interrupt() -> _Interrupt:
    e = _Interrupt()
    _in_flight[0] = weakref.ref(e)
    return e


def _fire() -> None:
    """Mark the stack fired, top first (a signal landing from that step on is collected), and raise. (No local
    names the interrupt: a frame of its own traceback holding it would keep it alive, 'in flight', for good.)"""
    _stack[-1].fired = True
    for b in _stack:
        b.fired = True
    raise _interrupt()


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    if not _stack:
        return  # the outermost block is ending: the command is done
    top = _stack[-1]
    if _raises(top):
        _fire()
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
        at = next((i for i, x in enumerate(_stack) if x is b), None)  # None: cut by the block around it already
        if at is not None:
            del _stack[at:]  # b, and any block above it whose exit an interrupt skipped
            if at == 0:  # the outermost block: a signal now finds an empty stack and is ignored
                for signum, handler in _saved.items():
                    signal.signal(signum, signal.SIG_IGN if _then_ignore[0] else handler)
                _saved.clear()


def back_to(pending: list[int]) -> None:
    """The stretches entered in the hold whose list is ``pending`` are over: cut them off. Call it first thing in
    the ``except`` that caught their interrupt. One whose exit that interrupt skipped (it landed in contextlib's
    ``__exit__``, before the generator's ``finally``) would stay on the stack, fired, while the hold goes on
    (a run saying its outcome), and a signal with no exception being handled would raise from it again."""
    at = next((i for i, x in enumerate(_stack) if x.pending is pending), None)
    if at is not None:
        del _stack[at + 1:]


forget_blocks = _stack.clear
"""The command is over (``kit.cli``, where the process exits after it): every block is forgotten and a signal
from the call on finds an empty stack, ignored. A C function: no interrupt can land between its call and its
effect, as one can at the first step of a Python function. Then ``ignore_from_now``."""


def ignore_from_now() -> None:
    """After ``forget_blocks``: SIGINT, SIGTERM and SIGHUP ignored for the rest of the process, also where the
    outermost block's own exit was skipped (at shutdown Python resets its handlers to the default action, and a
    storm's SIGTERM would end the process with 143)."""
    for sig in HELD:
        signal.signal(sig, signal.SIG_IGN)
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
        if len(_stack) > 1 and not _stack[-2].raises and _stack[-2].pending:
            _fire()  # a signal came between the hold around and this stretch: it interrupts the stretch now
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
            outer.done = True

    with _in_force(b, before_leaving=ended if drop else None):
        yield b.pending
    if drop or not b.pending:
        return
    below = _stack[-1] if _stack else None
    if below is not None and not below.raises:
        below.pending.extend(b.pending)
    elif below is None:
        raise KeyboardInterrupt
    elif _raises(below):
        _fire()


class OutputClosed(KeyboardInterrupt):
    """The reader of kit's output went away (`kit run M 2>&1 | head`): the work stops as an interrupt would stop it
    (servers stopped, the bundle consistent and resumable), and the command ends as SIGPIPE would end it (141)."""


def silence_output() -> None:
    """Point stdout and stderr at /dev/null: what kit still writes (its cleanup, its outcome, the interpreter's last
    flush) meets no closed pipe."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)


def output_closed() -> NoReturn:
    """A write met a closed pipe during work that must stop cleanly: silence the output, then interrupt."""
    silence_output()
    raise OutputClosed
