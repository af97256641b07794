"""deferred_interrupts with real signals sent to this process: held during the block, re-delivered after it,
and a block inside another neither re-delivers early nor drops what arrived.

The signals this process sends itself go by ``signal.raise_signal``: CPython runs the Python handler before it
returns, so where a signal lands is where the test says. ``os.kill(os.getpid(), ...)`` left the handler to the
main thread's next check. (A unit tier run beside docker image builds had 4 failures, one of them in this file;
six busy loops beside this file did not make the os.kill form fail in five runs, so that was not shown to be the
cause: this form only takes the question away.)"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from kit.plumbing.interrupts import deferred_interrupts


@pytest.fixture(autouse=True)
def heard() -> Iterator[None]:
    """Every signal heard during a test, whatever this process started with (a background job's `make test`
    starts with SIGINT ignored, which the blocks keep ignored): Ctrl-C as Python's own, the others a no-op."""
    old = {sig: signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else lambda *_: None)
           for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    yield
    for sig, handler in old.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_block_is_held_then_delivered(sig: signal.Signals) -> None:
    done = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupts() as pending:
        signal.raise_signal(sig)
        done.append("still here after the signal")
        assert pending == [sig]
    assert done == ["still here after the signal"]


def test_nested_blocks_deliver_once_when_the_outer_one_ends() -> None:
    steps = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        with deferred_interrupts():
            signal.raise_signal(signal.SIGTERM)
            steps.append("inner done")
        steps.append("outer goes on after the inner block")  # an inner re-delivery would skip this
    assert steps == ["inner done", "outer goes on after the inner block"]
    with deferred_interrupts() as pending:  # the handlers are back: a new block starts empty
        assert pending == []


def test_a_storm_never_replaces_the_outcome_nor_leaves_a_block_behind() -> None:
    """The shape of `kit run` (the command's stretch, the run's dropping hold, the cells' stretch inside it, the
    outcome raised in the hold) under SIGTERMs from another process every ~50 µs, for 3 s: every round ends with
    its outcome, never a KeyboardInterrupt in its place, every cell begun is stopped, and the handler of old is
    back after each. With handlers swapped and restored by each block (before 2026-12-05) an interrupt escaped
    between two states within the first second, out to pytest itself (and test_signal_storm[1.5] failed in CI:
    exit 130 without the resume command)."""
    from kit.experiment.signals import signals_as_interrupts
    from kit.plumbing import interrupts

    class Outcome(Exception):
        pass

    seen: list[int] = []

    def mine(signum: int, _frame: object) -> None:
        seen.append(signum)

    old = signal.signal(signal.SIGTERM, mine)  # between the rounds the storm meets this one
    storm = subprocess.Popen([sys.executable, "-c", STORM, str(os.getpid())])
    cells = {"begun": 0, "stopped": 0}
    kept: list[BaseException] = []
    outcomes = {"outcome": 0, "escaped": 0, "interrupted in the cells": 0, "interrupted before the hold": 0}
    try:
        end = time.monotonic() + float(os.environ.get("KIT_STORM_S", "3"))  # longer: KIT_STORM_S=60
        while time.monotonic() < end:
            held = False
            try:
                with signals_as_interrupts(), deferred_interrupts(drop=True) as pending:
                    held = True  # an interrupt before this is the command's (kit: no bundle yet)
                    try:
                        with signals_as_interrupts(), deferred_interrupts():  # the cells, then one cell
                            cells["begun"] += 1
                            try:
                                with signals_as_interrupts():  # the cell's work
                                    stop = time.monotonic() + random.uniform(0, 2e-4)
                                    while time.monotonic() < stop:
                                        pass
                            finally:
                                cells["stopped"] += 1  # its server's stop: never cut short
                    except KeyboardInterrupt as e:
                        interrupts.back_to(pending)
                        outcomes["interrupted in the cells"] += 1
                        kept.append(e)  # the run keeps it for its outcome (kit.experiment.run)
                    stop = time.monotonic() + random.uniform(0, 1e-4)  # the outcome: sealing, the report
                    while time.monotonic() < stop:
                        pass
                    raise Outcome
            except Outcome:
                outcomes["outcome"] += 1
            except KeyboardInterrupt:
                outcomes["escaped" if held else "interrupted before the hold"] += 1
            assert signal.getsignal(signal.SIGTERM) is mine
            assert interrupts._stack == []
            kept.clear()
    finally:
        storm.kill()
        storm.wait()
        signal.signal(signal.SIGTERM, old)
    assert outcomes["escaped"] == 0, outcomes  # (handlers swapped per block: pytest itself got the KeyboardInterrupt)
    assert outcomes["interrupted in the cells"] > 0, outcomes  # the storm reached the rounds
    assert cells["stopped"] == cells["begun"], cells


STORM = """
import os, sys, time
pid = int(sys.argv[1])
while True:
    os.kill(pid, 15)
    time.sleep(5e-5)
"""


def test_a_signal_ignored_before_the_first_block_stays_ignored() -> None:
    """`nohup kit run` starts with SIGHUP ignored (`cmd &`: SIGINT): no block turns it into an interrupt."""
    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with deferred_interrupts() as pending:
            signal.raise_signal(signal.SIGHUP)
            time.sleep(0.01)
            assert pending == []
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, old)


def test_a_stretch_is_interrupted_once_and_its_cleanup_is_not_cut_short() -> None:
    """The first signal in a stretch raises; one during the cleanup that interrupt runs (not itself held) is
    collected, then dropped: it would replace the interrupt in flight halfway through the cleanup."""
    from kit.experiment.signals import signals_as_interrupts

    steps = []
    with deferred_interrupts(drop=True) as pending:
        try:
            with signals_as_interrupts():
                try:
                    signal.raise_signal(signal.SIGTERM)
                    time.sleep(1)  # not reached: the handler raised in raise_signal
                    steps.append("not reached")
                finally:
                    signal.raise_signal(signal.SIGTERM)
                    time.sleep(0.01)
                    steps.append("cleanup done")
        except KeyboardInterrupt:
            steps.append("interrupted")
        assert pending == []  # the stretch's own extra signal went with it
    assert steps == ["cleanup done", "interrupted"]


def test_a_signal_between_a_hold_and_its_stretch_interrupts_the_stretch_at_once() -> None:
    """A cell's hold, then its stretch: a signal between the two (review) interrupts the work as it begins, not
    after it (a cell's work can last hours)."""
    from kit.experiment.signals import signals_as_interrupts

    steps = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupts():
        signal.raise_signal(signal.SIGTERM)
        time.sleep(0.01)
        with signals_as_interrupts():
            steps.append("the work began")
    assert steps == []


def test_an_interrupt_a_finalizer_swallowed_does_not_deafen_the_stretch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python prints and drops a KeyboardInterrupt raised in a ``__del__`` (review): the next signal, with no
    interrupt being held any more, interrupts again."""
    from kit.experiment.signals import signals_as_interrupts

    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)  # Python's own: print, drop (pytest keeps it)

    class Finalized:
        def __del__(self) -> None:
            signal.raise_signal(signal.SIGTERM)  # handled in this frame: the interrupt dies with it
            time.sleep(0.01)

    steps = []
    with pytest.raises(KeyboardInterrupt), signals_as_interrupts():
        Finalized()
        steps.append("the first interrupt was swallowed")
        signal.raise_signal(signal.SIGTERM)
        time.sleep(1)
        steps.append("not reached")
    assert steps == ["the first interrupt was swallowed"]


def test_a_cleanup_that_keeps_the_interrupt_to_raise_later_is_not_cut_short() -> None:
    """As kit.load.session's _discard stops its drivers: the first interrupt is caught and kept, to be raised
    once every driver is stopped; the signals that come meanwhile (no exception being handled, the interrupt
    still held) do not cut the next stops short (review: 0 of 4 drivers stopped under a storm)."""
    from kit.experiment.signals import signals_as_interrupts

    stopped = []
    with pytest.raises(KeyboardInterrupt), signals_as_interrupts():
        first: BaseException | None = None
        for driver in range(3):
            try:
                signal.raise_signal(signal.SIGTERM)
                time.sleep(0.01)  # a driver's stop (the signal landed in raise_signal, inside it)
                stopped.append(driver)
            except BaseException as e:  # noqa: BLE001 - as _discard: every one stopped, then the first raised
                first = first or e
        if first is not None:
            raise first
    assert stopped == [1, 2]
