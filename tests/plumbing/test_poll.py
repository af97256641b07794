"""poll_until: ticks keep their rhythm, the deadline holds, the check always runs once, backoff grows."""

from __future__ import annotations

import time
from itertools import pairwise

from kit.plumbing.poll import Deadline, poll_until


def test_ticks_keep_their_rhythm_even_when_the_check_is_slow() -> None:
    ticks: list[float] = []

    def slow() -> bool:
        ticks.append(time.monotonic())
        time.sleep(0.04)  # 40 % of the interval: the next tick must not move back by it
        return False

    poll_until(slow, 1.0, interval=0.1)
    gaps = [b - a for a, b in pairwise(ticks)]
    assert len(ticks) >= 6
    assert min(gaps) >= 0.095
    assert sorted(gaps)[len(gaps) // 2] < 0.125  # median gap is the interval (0.1), not interval + check (0.14)


def test_returns_the_first_truthy_answer_at_once() -> None:
    calls = iter([0, None, "ready", "late"])
    t0 = time.monotonic()
    assert poll_until(lambda: next(calls), 5.0, interval=0.01) == "ready"
    assert time.monotonic() - t0 < 1.0


def test_deadline_returns_the_last_falsy_answer_on_time() -> None:
    t0 = time.monotonic()
    assert poll_until(lambda: [], 0.2, interval=0.02) == []
    elapsed = time.monotonic() - t0
    assert 0.19 <= elapsed < 0.6


def test_check_runs_once_even_after_the_deadline() -> None:
    calls: list[int] = []
    assert poll_until(lambda: calls.append(1), Deadline(time.monotonic() - 1.0)) is None
    assert calls == [1]


def test_backoff_grows_the_interval_up_to_the_cap() -> None:
    ticks: list[float] = []
    poll_until(lambda: ticks.append(time.monotonic()), 1.2, interval=0.05, backoff=2.0, max_interval=0.2)
    gaps = [b - a for a, b in pairwise(ticks)]
    assert gaps[0] >= 0.045 and gaps[1] >= 0.095 and gaps[2] >= 0.195  # 0.05, 0.1, then the cap
    assert sorted(gaps)[len(gaps) // 2] < 0.26  # at the cap, not beyond it


def test_deadline_object() -> None:
    d = Deadline.after(10)
    assert not d.passed() and 9 < d.remaining() <= 10
    assert Deadline(time.monotonic() - 1).remaining() == 0.0
