"""poll_until: ticks keep their rhythm, the deadline holds, the check always runs once, backoff grows.

The rhythm is checked on a fake clock (exact, and immune to a busy machine); one test runs on the real one.
"""

from __future__ import annotations

import time
from itertools import pairwise

import pytest

from kit.plumbing import poll
from kit.plumbing.poll import Deadline, poll_until


class FakeClock:
    """``time.monotonic``/``time.sleep`` for kit.plumbing.poll: sleeping advances the clock exactly."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(poll, "time", fake)
    return fake


def test_ticks_keep_their_rhythm_even_when_the_check_is_slow(clock: FakeClock) -> None:
    ticks: list[float] = []

    def slow() -> bool:
        ticks.append(clock.now)
        clock.now += 0.04  # the check takes 40 % of the interval: the next tick must not move back by it
        return False

    poll_until(slow, 1.0, interval=0.1)
    assert [round(t - 100.0, 6) for t in ticks] == [round(0.1 * i, 6) for i in range(11)]


def test_deadline_is_kept_and_the_last_answer_returned(clock: FakeClock) -> None:
    assert poll_until(lambda: [], 0.25, interval=0.1) == []
    assert round(clock.now - 100.0, 6) == 0.25  # the last sleep is cut at the deadline, not a whole interval


def test_returns_the_first_truthy_answer_at_once(clock: FakeClock) -> None:
    calls = iter([0, None, "ready", "late"])
    assert poll_until(lambda: next(calls), 5.0, interval=0.01) == "ready"
    assert round(clock.now - 100.0, 6) == 0.02


def test_check_runs_once_even_after_the_deadline(clock: FakeClock) -> None:
    calls: list[int] = []
    assert poll_until(lambda: calls.append(1), Deadline(clock.now - 1.0)) is None
    assert calls == [1] and clock.sleeps == []


def test_backoff_grows_the_interval_up_to_the_cap(clock: FakeClock) -> None:
    ticks: list[float] = []
    poll_until(lambda: ticks.append(clock.now), 2.0, interval=0.05, backoff=1.5, max_interval=1.0)
    gaps = [round(b - a, 6) for a, b in pairwise(ticks)]
    assert gaps[:4] == [0.05, 0.075, 0.1125, 0.16875]
    assert max(gaps) <= 1.0


def test_deadline_object(clock: FakeClock) -> None:
    d = Deadline.after(10)
    assert not d.passed() and d.remaining() == 10
    clock.now += 10
    assert d.passed() and d.remaining() == 0.0


def test_on_the_real_clock() -> None:
    t0 = time.monotonic()
    assert not poll_until(lambda: False, 0.2, interval=0.02)
    assert 0.2 <= time.monotonic() - t0 < 5.0
