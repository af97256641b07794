"""The arrival schedules (kit.load.arrivals), checked against scipy's distributions, not against kit's own maths."""

from __future__ import annotations

import statistics

import pytest
from scipy import stats

from kit.load.arrivals import Arrival, check, check_sent, count_for, schedule_ns, schedule_s, split


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]


@pytest.mark.parametrize("rate", [1.0, 10.0, 100.0])
def test_poisson_gaps_are_exponential_at_the_rate(rate: float) -> None:
    times = schedule_s(Arrival("poisson", rate, 1.0, seed=11), 2000)
    assert times == sorted(times)
    assert times[-1] == pytest.approx(2000 / rate)  # vLLM's normalisation: the offered rate is the one asked
    res = stats.kstest(gaps(times), "expon", args=(0, 1 / rate))
    assert res.pvalue > 0.01, res
    # and the test has power: the same gaps are not exponential at a rate 15 % off
    assert stats.kstest(gaps(times), "expon", args=(0, 1 / (1.15 * rate))).pvalue < 0.01


@pytest.mark.parametrize("burstiness", [0.25, 0.5, 2.0, 4.0])
def test_gamma_gaps_follow_the_gamma_with_cv_one_over_sqrt_burstiness(burstiness: float) -> None:
    rate = 20.0
    g = gaps(schedule_s(Arrival("gamma", rate, burstiness, seed=5), 4000))
    cv = statistics.stdev(g) / statistics.mean(g)
    assert cv == pytest.approx(burstiness ** -0.5, rel=0.08)
    assert statistics.mean(g) == pytest.approx(1 / rate, rel=0.01)
    res = stats.kstest(g, "gamma", args=(burstiness, 0, 1 / (rate * burstiness)))
    assert res.pvalue > 0.01, res
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue < 0.01  # not a Poisson process


def test_schedules_are_seeded_and_reproducible() -> None:
    a = schedule_ns(Arrival("poisson", 10.0, 1.0, seed=1), 50)
    assert a == schedule_ns(Arrival("poisson", 10.0, 1.0, seed=1), 50)
    assert a != schedule_ns(Arrival("poisson", 10.0, 1.0, seed=2), 50)
    assert all(isinstance(x, int) for x in a) and a[-1] == 5_000_000_000


def test_split_deals_round_robin_and_keeps_every_request() -> None:
    sched = schedule_ns(Arrival("gamma", 50.0, 0.5, seed=3), 11)
    parts = split(sched, 3)
    assert [idx for idx, _ in parts] == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8]]
    assert sorted(t for _, due in parts for t in due) == sched


def test_bad_settings_are_named() -> None:
    assert check(Arrival("poisson", 0.0)) == ["an open-loop level needs a request rate > 0 (got 0.0)"]
    assert "use process gamma" in check(Arrival("poisson", 1.0, 0.5))[0]
    assert "not one of" in check(Arrival("uniform", 1.0))[0]
    assert check(Arrival("gamma", 1.0, float("inf")))
    with pytest.raises(ValueError, match="no schedule"):
        schedule_s(Arrival("closed"), 3)
    with pytest.raises(ValueError, match=r"1\.\.1000000"):
        schedule_s(Arrival("poisson", 1.0), 0)
    assert count_for(Arrival("poisson", 2.5), 10.0) == 25 and count_for(Arrival("poisson", 0.01), 1.0) == 1


def test_check_sent_holds_records_against_the_rebuilt_schedule() -> None:
    a = Arrival("gamma", 5.0, 0.5, seed=8)
    sched = schedule_ns(a, 10)
    assert check_sent(a, 10, list(reversed(sched)), 0) == []
    assert check_sent(a, 10, sched[:8], 2) == []  # two not sent by a time-limited level's end
    assert "schedule holds 10" in check_sent(a, 10, sched[:8], 0)[0]
    assert "not in the schedule rebuilt from seed 8" in check_sent(a, 10, [*sched[:9], sched[9] + 1], 0)[0]
    assert "more often" in check_sent(a, 10, [*sched[:9], sched[0]], 0)[0]
    assert check_sent(Arrival("gamma", 5.0, 0.5, seed=9), 10, sched, 0)  # another seed: another schedule
