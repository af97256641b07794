"""kit reproduce's verdict under simulation (tests/stats/sim_reproduce.py: numpy lognormal cells, the original's
A/B by scipy; kit's rule only at the end): a faithful re-run is falsely "inconsistent" at most alpha of the time on
the same host and on a host 25 % slower; a flipped effect is caught; a faithful precise re-run is "reproduced"; the
repeats figure is computed at no difference and delivers about the power it promises. Seeded: the same numbers every
run. The full table (2000 pairs a row) is docs/reproduce.md's: ``python -m tests.stats.sim_reproduce --write-table
docs/reproduce.md``."""

from __future__ import annotations

import math

import numpy as np

from kit.reproduce.equivalence import Contrast, repeats_at_zero
from tests.stats.sim_reproduce import ALPHA, CVS, REPEATS, RULE, SCENARIOS, TRUE_EFFECT, Scenario, rates, seed_of

FAITHFUL = [s for s in SCENARIOS if not s.changed]
FLIPPED = next(s for s in SCENARIOS if s.name == "effect flipped")
HALVED = next(s for s in SCENARIOS if s.name == "effect halved")


def test_a_faithful_rerun_is_falsely_inconsistent_at_most_alpha_on_either_host() -> None:
    """2 hosts x 3 CVs x 3 repeat counts x 150 pairs: at most 5 % over all 2700, and no row beyond 5 % plus three
    binomial standard errors (a row of 150 at a true 5 % lies within it 99.9 % of the time)."""
    pairs = 150
    slack = 3 * math.sqrt(ALPHA * (1 - ALPHA) / pairs)
    total = alarms = 0
    for i, sc in enumerate(FAITHFUL):
        for j, cv in enumerate(CVS):
            for k, reps in enumerate(REPEATS):
                r = rates(sc, cv, reps, pairs, seed_of(i, j, k) + 7)
                print(f"{sc.name}, CV {cv:.0%}, {reps} repeats: inconsistent {r.inconsistent}/{pairs}")
                assert r.inconsistent / pairs <= ALPHA + slack, (sc.name, cv, reps)
                total += pairs
                alarms += r.inconsistent
    print(f"false inconsistent: {alarms}/{total}")
    assert alarms / total <= ALPHA


def test_a_flipped_effect_is_caught_at_cv_10_percent_and_8_repeats() -> None:
    r = rates(FLIPPED, 0.10, 8, 300, 11)
    assert r.inconsistent / r.pairs >= 0.80 and r.reproduced == 0


def test_a_halved_effect_is_caught_when_the_cells_are_precise() -> None:
    r = rates(HALVED, 0.03, 8, 300, 12)
    assert r.inconsistent / r.pairs >= 0.80 and r.reproduced / r.pairs <= ALPHA


def test_a_faithful_precise_rerun_is_reproduced_at_cv_3_percent_and_4_repeats() -> None:
    for i, sc in enumerate(FAITHFUL):
        r = rates(sc, 0.03, 4, 300, 13 + i)
        print(f"{sc.name}: reproduced {r.reproduced}/{r.pairs}")
        assert r.reproduced / r.pairs >= 0.70


def _groups(sd: float, k: int) -> tuple[tuple[float, int], ...]:
    return ((sd * sd, k),) * 4


def test_the_repeats_figure_ignores_the_observed_difference_and_holds_its_power() -> None:
    """At CV 10 % the figure is the same whatever D was observed (it is computed at D = 0 from the pooled SD); run
    at that many repeats, faithful re-runs are reproduced about as often as its 80 % promises (>= 70 %: the margin
    itself rests on the original's estimate)."""
    sd = math.sqrt(math.log1p(0.10**2))
    delta = RULE.delta(math.log(TRUE_EFFECT))
    figures = {repeats_at_zero(Contrast(d, 0.07, 20.0, _groups(sd, 4)), delta, ALPHA) for d in (-0.3, 0.0, 0.05, 0.2)}
    assert len(figures) == 1
    (k,) = figures
    assert k is not None and 15 <= k <= 40, k
    r = rates(Scenario("faithful, same host", 1.0), 0.10, k, 200, 14)
    print(f"{k} repeats: reproduced {r.reproduced}/{r.pairs}")
    assert r.reproduced / r.pairs >= 0.70
    assert np.isclose(r.inconsistent / r.pairs, ALPHA, atol=0.04)


def test_under_drift_between_blocks_the_blocked_default_still_reproduces_where_welch_cannot() -> None:
    """Each ABBA block of each run shares a lognormal multiplier of CV 10 % (both arms: drift), cells CV 3 %, 4
    repeats: with the blocked analysis (the default) a faithful re-run is reproduced >= 70 % of the time and falsely
    inconsistent at most alpha (+ 3 binomial SEs); the same cells under Welch are reproduced far less often
    (measured: 88 % against 21 % at 2000 pairs)."""
    pairs = 300
    blocked = rates(FAITHFUL[0], 0.03, 4, pairs, 15, "blocked", block_cv=0.10)
    welch = rates(FAITHFUL[0], 0.03, 4, pairs, 15, "welch", block_cv=0.10)
    print(f"drift: reproduced {blocked.reproduced}/{pairs} blocked, {welch.reproduced}/{pairs} Welch")
    assert blocked.reproduced / pairs >= 0.70 and welch.reproduced / pairs <= 0.40
    assert blocked.inconsistent / pairs <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / pairs)


def test_the_generators_blocked_test_is_kits_blocked_model() -> None:
    """The generator's closed form (the paired t on per-repeat differences, k - 1 df) and kit's
    kit.stats.model.blocked give the same p on the same cells: the two are written independently."""
    from kit.stats.model import blocked
    from tests.stats.sim_reproduce import blocked_p
    rng = np.random.default_rng(3)
    for k in (2, 4, 6, 8):
        a, b = rng.normal(0, 0.1, (5, k)), rng.normal(0.05, 0.1, (5, k))
        blocks = list(range(k))
        kit_p = [blocked(a[i], blocks, b[i], blocks) for i in range(5)]
        assert all(w is not None for w in kit_p)
        assert np.allclose(blocked_p(a, b), [w.p for w in kit_p if w is not None], rtol=1e-9)
