"""The pure group-sequential reproduce rule (``kit.reproduce.sequential``, `kit reproduce --until-decided`): at a
single last look it is the fixed rule; decisions stay; each TOST side once rejected stays rejected; Holm passes its
alpha on; a look whose new run's SE rests on one df tests nothing; the information fraction is the new run's cells
over the planned ones; the stop rule; the note that the maximum cannot reach "reproduced"."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from kit.reproduce.decide import Rule, decide
from kit.reproduce.equivalence import Contrast, p_zero
from kit.reproduce.sequential import LookStat, Past, SeqDecision, decide_look, stop_of
from kit.stats.sequential import boundaries

ALPHA = 0.05
DELTA = 0.1


def stat(d: float, se: float = 0.02, *, n: int = 4, most: int = 8, df: float = 10.0, df_new: float | None = None,
         claimed: float | None = -0.3, se_o: float = 0.01, withheld: bool = False) -> LookStat:
    return LookStat(Contrast(d, se, df, ()), 2 / n, 2 / most, float(n - 1) if df_new is None else df_new, 7.0,
                    se_o, se_o, DELTA, claimed, withheld)


def past(dec: SeqDecision) -> Past:
    def p(x: float | None) -> float:
        return x if dec.tested and x is not None else 1.0
    return Past(dec.fraction, p(dec.p_zero), p(dec.p_lower), p(dec.p_upper), dec.direction_held, dec.tested)


def run(looks: list[list[LookStat]], most_looks: int) -> list[list[SeqDecision]]:
    """Every look in turn, each after the ones before (what the bundle records)."""
    history: list[list[Past]] = [[] for _ in looks[0]]
    out = []
    for k, now in enumerate(looks, start=1):
        got = decide_look(history, now, ALPHA, final=k == most_looks)
        for h, d in zip(history, got, strict=True):
            h.append(past(d))
        out.append(got)
    return out


def test_a_single_last_look_is_the_fixed_rule() -> None:
    rng = np.random.default_rng(3)
    rule = Rule(effect_margin=0.5, absolute_margin=math.expm1(DELTA), alpha=ALPHA)
    seen = set()
    for _ in range(400):
        c = Contrast(float(rng.normal(0, 0.08)), float(rng.uniform(0.01, 0.06)), float(rng.uniform(2, 30)), ())
        claimed = None if rng.random() < 0.5 else -0.3
        fixed = decide(c, claimed, p_zero(c), rule)  # one comparison: Holm-adjusted p is the raw p
        s = LookStat(c, 2 / 8, 2 / 8, 7.0, 7.0, 0.01, 0.01, rule.delta(claimed), claimed)
        (seq,) = decide_look([[]], [s], ALPHA, final=True)
        assert seq.fraction == 1.0 and seq.verdict == fixed.verdict, (c, claimed, seq, fixed)
        seen.add(fixed.verdict)
    assert seen == {"reproduced", "inconsistent", "imprecise"}


def test_fractions_are_the_new_runs_cells_and_the_first_blocked_look_tests_nothing() -> None:
    (first,) = decide_look([[]], [stat(0.5, n=2, df_new=1.0)], ALPHA, final=False)  # D far off: not tested
    assert first.fraction == 0.0 and not first.tested and first.verdict == "continue"
    assert first.nominal_zero == 0.0 and first.nominal_tost == 0.0 and first.repeated_ci is None
    looks = run([[stat(0.0, n=2, df_new=1.0)], [stat(0.0, n=4)], [stat(0.0, n=6)], [stat(0.0, n=8)]], 4)
    assert [d[0].fraction for d in looks] == [0.0, 0.5, 0.75, 1.0]
    # the boundaries are those of looks at 1/2, 3/4 and 1 (the untested look spends nothing)
    b = boundaries([0.5, 0.75, 1.0], ALPHA, sides=1, final=True)
    assert looks[2][0].nominal_tost == pytest.approx(float(norm.sf(b[1])))


def test_reproduced_once_stays_reproduced() -> None:
    looks = run([[stat(0.0, n=2, df_new=1.0)], [stat(0.0, se=0.01)], [stat(0.3, se=0.05, n=6)]], 4)
    assert looks[1][0].verdict == "reproduced" and looks[1][0].decided_at == 2
    assert looks[2][0].verdict == "reproduced" and looks[2][0].decided_at == 2  # D jumped; the verdict stays


def test_each_tost_side_stays_rejected_and_direction_counts_at_the_completing_look() -> None:
    # look 2: D well below +delta (upper side rejected) but near -delta; look 3: back in the middle (lower rejected)
    looks = run([[stat(0.0, n=2, df_new=1.0)], [stat(-0.09, se=0.03, claimed=None)],
                 [stat(0.0, se=0.01, n=6, claimed=None)]], 4)
    assert looks[1][0].upper_rejected_at == 2 and looks[1][0].lower_rejected_at is None
    assert looks[1][0].verdict == "continue"
    assert looks[2][0].lower_rejected_at == 3 and looks[2][0].verdict == "reproduced"
    # the original's effect -0.05 and D +0.06 inside a margin of 0.1: the new effect points the other way
    flipped = run([[stat(0.0, n=2, df_new=1.0)], [stat(0.06, se=0.005, claimed=-0.05)]], 4)
    assert flipped[1][0].direction_held is False and flipped[1][0].verdict != "reproduced"


def test_inconsistent_and_holm_passes_its_alpha_on() -> None:
    strong = stat(0.5, se=0.02)
    # p of the weak one between its boundary at alpha/2 and at alpha (two-sided, looks at 1/2)
    lo, hi = (2 * float(norm.sf(boundaries([0.5], a)[0])) for a in (ALPHA / 2, ALPHA))
    z = float(norm.isf((lo + hi) / 4))
    weak = LookStat(Contrast(z * 0.02, 0.02, 1e9, ()), 2 / 4, 2 / 8, 1e9, 1e9, 0.01, 0.01, 1e-6, None)
    alone = decide_look([[], []], [stat(0.0, se=0.02), weak], ALPHA, final=False)
    assert alone[1].verdict == "continue" and alone[1].family_alpha == ALPHA / 2
    both = decide_look([[], []], [strong, weak], ALPHA, final=False)
    assert both[0].verdict == "inconsistent" and both[1].verdict == "inconsistent" and both[1].family_alpha == ALPHA
    assert stop_of([d.verdict for d in both], final=False) == ("decided", "inconsistent",
                                                               "2 of 2 judged effect(s) inconsistent")


def test_a_withheld_effect_is_never_decided_and_is_imprecise_at_the_end() -> None:
    looks = run([[stat(0.0, n=2, df_new=1.0, withheld=True)], [stat(0.0, withheld=True)],
                 [stat(0.0, n=6, withheld=True)], [stat(0.0, n=8, withheld=True)]], 4)
    assert [d[0].verdict for d in looks] == ["withheld", "withheld", "withheld", "imprecise"]
    assert not any(d[0].tested for d in looks)


def test_the_stop_rule() -> None:
    assert stop_of(["reproduced", "reproduced"], final=False)[:2] == ("decided", "reproduced")
    assert stop_of(["reproduced", "continue"], final=False)[:2] == (None, None)
    assert stop_of(["reproduced", "imprecise"], final=True)[:2] == ("max_repeats", "imprecise")
    assert stop_of(["inconsistent", "continue"], final=False)[:2] == ("decided", "inconsistent")
    assert stop_of([], final=True)[:2] == ("max_repeats", "imprecise")


def test_the_maximum_that_cannot_show_equivalence_is_said() -> None:
    (precise,) = decide_look([[]], [stat(0.05, se=0.03, se_o=0.01)], ALPHA, final=False)
    assert precise.reachable is True and precise.verdict == "continue"
    (capped,) = decide_look([[]], [stat(0.0, se=0.08, se_o=0.07)], ALPHA, final=False)  # the original alone: 0.07
    assert capped.reachable is False and capped.verdict == "continue"
