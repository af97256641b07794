"""The repeated confidence intervals of a sequential run cover the true effect at least as often as they say, where
the naive fixed-sample interval at the data-chosen stop covers less: by the independent simulation of
tests/stats/sim_rci.py (its own generator and Welch statistics; kit's boundaries decide the stop and kit's
``repeated_ci`` makes the interval). The full table: docs/statistics.md (make seq-table)."""

from __future__ import annotations

import math

from tests.stats.sim_rci import simulate

RUNS = 3000
SE = math.sqrt(0.05 * 0.95 / RUNS)  # a 95 % coverage's simulation error over RUNS runs


def test_repeated_intervals_cover_where_the_naive_one_does_not() -> None:
    # Pocock-type, 8 looks, a small effect: the run stops early on lucky draws, so the naive interval misses
    c = simulate("pocock", 16, 0.05, 0.10, RUNS, seed=1)
    assert c.naive < 0.95 - 3 * SE, c  # measured at 20 000 runs: 92.2-92.6 %
    assert c.repeated >= 0.95 - 2 * SE and c.simultaneous >= 0.95 - 2 * SE, c


def test_repeated_intervals_cover_under_obrien_fleming_and_no_effect() -> None:
    for spending, effect in (("obrien-fleming", 0.05), ("obrien-fleming", 0.0), ("pocock", 0.0)):
        c = simulate(spending, 8, effect, 0.10, RUNS, seed=2)
        assert c.simultaneous >= 0.95 - 2 * SE, (spending, effect, c)
