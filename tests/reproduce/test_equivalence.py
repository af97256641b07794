"""kit.reproduce.equivalence and kit.reproduce.decide against computations kit did not write: scipy's Welch t-tests
(the test of no difference, and TOST built from ``scipy.stats.ttest_ind`` on shifted samples), Student's t with
Hsu's df, the four-group Welch–Satterthwaite df written out by hand, and the repeats figure from scipy's t
quantiles."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from kit.reproduce.decide import Rule, decide
from kit.reproduce.equivalence import (
    Contrast,
    contrast,
    difference,
    interval,
    log_margin,
    logs,
    p_equivalent,
    p_zero,
    pooled_sd,
    repeats_at_zero,
)

DELTA = math.log(1.05)
ALPHA = 0.05
RULE = Rule(effect_margin=0.5, absolute_margin=0.05, alpha=ALPHA)


def _scipy_tost(new: np.ndarray, orig: np.ndarray, delta: float) -> float:
    """TOST's p from scipy's Welch test on shifted samples: H0 d <= -delta is ttest_ind(new + delta, orig,
    greater), H0 d >= delta is ttest_ind(new - delta, orig, less)."""
    p_low = sps.ttest_ind(new + delta, orig, equal_var=False, alternative="greater").pvalue
    p_high = sps.ttest_ind(new - delta, orig, equal_var=False, alternative="less").pvalue
    return float(max(p_low, p_high))


@pytest.mark.parametrize("seed", range(40))
def test_the_tests_equal_scipy_welch_on_equal_cell_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 9))
    orig = rng.normal(0.0, rng.uniform(0.005, 0.08), k)
    new = rng.normal(rng.uniform(-0.12, 0.12), rng.uniform(0.005, 0.08), k)
    c = contrast(new, orig)
    assert c is not None
    assert p_equivalent(c, DELTA) == pytest.approx(_scipy_tost(new, orig, DELTA), rel=1e-9, abs=1e-12)
    assert p_zero(c) == pytest.approx(sps.ttest_ind(new, orig, equal_var=False).pvalue, rel=1e-9, abs=1e-12)
    d = decide(c, None, p_zero(c), RULE)  # no effect claimed: the absolute margin, a family of one
    expected = "reproduced" if p_equivalent(c, DELTA) < ALPHA else "inconsistent" if p_zero(c) < ALPHA \
        else "imprecise"
    assert d.verdict == expected and d.delta == pytest.approx(DELTA)
    # TOST is the (1 - 2 alpha) interval inside the margin; no difference is the (1 - alpha) interval over 0
    assert (d.low > -DELTA and d.high < DELTA) == (p_equivalent(c, DELTA) < ALPHA)
    low, high = interval(c, 1 - ALPHA)
    assert (low > 0 or high < 0) == (p_zero(c) < ALPHA)


def test_the_three_verdicts_occur_and_identical_numbers_reproduce() -> None:
    rng = np.random.default_rng(1)
    orig = rng.normal(0.0, 0.01, 6)
    same = contrast(orig.copy(), orig)
    assert same is not None and decide(same, None, p_zero(same), RULE).verdict == "reproduced"
    slower = contrast(orig + math.log(1.3), orig)
    assert slower is not None and decide(slower, None, p_zero(slower), RULE).verdict == "inconsistent"
    noisy = contrast(rng.normal(0.0, 0.2, 3), orig[:3])
    assert noisy is not None
    d = decide(noisy, None, p_zero(noisy), RULE)
    assert d.verdict == "imprecise" and d.repeats_needed is not None and d.repeats_needed > 3


def test_the_margin_is_relative_to_the_effect_found_and_its_direction_must_hold() -> None:
    """An original effect of x0.8: the margin is half its log; a new effect within it reproduces, one that kept
    within the margin's interval but pointed the other way cannot (only possible with a wide margin)."""
    claimed = math.log(0.8)
    assert RULE.delta(claimed) == pytest.approx(0.5 * abs(claimed)) and RULE.delta(None) == pytest.approx(DELTA)
    tight = Contrast(0.05, 0.01, 30.0, ((1e-4, 8),) * 4)  # D = +0.05: the new effect x0.84
    assert decide(tight, claimed, 0.2, RULE).verdict == "reproduced"  # p adjusted not below alpha: not inconsistent
    assert decide(tight, claimed, 0.2, RULE).direction_held is True
    wide = Rule(effect_margin=1.0, absolute_margin=0.05, alpha=ALPHA)
    past = Contrast(-1.2 * claimed, 0.001, 30.0, ((1e-6, 8),) * 4)  # the new effect x1.05: direction reversed
    d = decide(past, claimed, 0.2, wide)
    assert d.direction_held is False and d.verdict == "imprecise"
    assert decide(past, claimed, 0.01, wide).verdict == "inconsistent"  # not reproduced, and D = 0 rejected


def test_a_detectable_difference_inside_the_margin_is_reproduced() -> None:
    """Two precise runs: D = -0.06 (the effect x0.455 against x0.483, the demo's fifth quiet-machine try), its 90 %
    interval far inside the margin of half a x0.483 effect, and D = 0 rejected. The margin is the user's statement
    that such a difference does not matter: reproduced, with the rejection kept in the decision; outside the
    margin the same rejection is inconsistent."""
    claimed = math.log(0.483)
    c = Contrast(-0.061, 0.017, 40.0, ((4e-4, 12),) * 4)
    d = decide(c, claimed, p_zero(c), RULE)
    assert p_zero(c) < ALPHA and d.p_equivalent < ALPHA
    assert d.verdict == "reproduced" and d.p_zero_adjusted < ALPHA and d.direction_held is True
    far = Contrast(-0.5, 0.017, 40.0, ((4e-4, 12),) * 4)  # beyond the margin (0.36)
    assert decide(far, claimed, p_zero(far), RULE).verdict == "inconsistent"


def test_unequal_cell_counts_use_hsus_df_like_kits_ab_test() -> None:
    rng = np.random.default_rng(7)
    orig, new = rng.normal(0, 0.03, 5), rng.normal(0.02, 0.05, 3)
    c = contrast(new, orig)
    assert c is not None and c.df == 2.0  # min(5, 3) - 1
    se = math.sqrt(new.var(ddof=1) / 3 + orig.var(ddof=1) / 5)
    d = new.mean() - orig.mean()
    p_low = sps.t.sf((d + DELTA) / se, 2)
    p_high = sps.t.cdf((d - DELTA) / se, 2)
    assert p_equivalent(c, DELTA) == pytest.approx(max(p_low, p_high), rel=1e-12)
    assert interval(c, 0.9)[1] - c.estimate == pytest.approx(sps.t.ppf(0.95, 2) * se, rel=1e-12)


def test_the_effect_difference_has_the_four_group_welch_satterthwaite_df() -> None:
    rng = np.random.default_rng(3)
    k = 4
    groups = [rng.normal(m, s, k) for m, s in ((0.1, 0.02), (0.0, 0.04), (0.12, 0.03), (0.0, 0.01))]
    new_arm, new_base, orig_arm, orig_base = groups
    c = difference(contrast(new_arm, new_base), contrast(orig_arm, orig_base))  # type: ignore[arg-type]
    v = [g.var(ddof=1) / k for g in groups]
    df = sum(v) ** 2 / sum(x**2 / (k - 1) for x in v)
    est = (new_arm.mean() - new_base.mean()) - (orig_arm.mean() - orig_base.mean())
    assert c.estimate == pytest.approx(est, rel=1e-12)
    assert c.se == pytest.approx(math.sqrt(sum(v)), rel=1e-12)
    assert c.df == pytest.approx(df, rel=1e-12)


def test_repeats_at_zero_is_the_first_count_with_80_percent_power_and_ignores_the_estimate() -> None:
    """delta >= (t(0.95, df) + t(0.9, df)) * sd * sqrt(4 / k), df = 4 (k - 1), with scipy's quantiles; the pooled SD
    from the groups; the same figure whatever the estimate."""
    groups = ((0.012, 4), (0.008, 4), (0.01, 3), (0.011, 5))
    sd = math.sqrt(sum((n - 1) * v for v, n in groups) / sum(n - 1 for _, n in groups))
    delta = 0.5 * abs(math.log(0.8))
    figures = {repeats_at_zero(Contrast(est, 0.05, 10.0, groups), delta, ALPHA) for est in (-0.4, 0.0, 0.1)}
    assert len(figures) == 1
    (k,) = figures
    assert k is not None
    assert pooled_sd(Contrast(0.0, 0.05, 10.0, groups)) == pytest.approx(sd)

    def need(n: int) -> float:
        df = 4 * (n - 1)
        return float((sps.t.ppf(0.95, df) + sps.t.ppf(0.9, df)) * sd * math.sqrt(4 / n))

    assert need(k) <= delta < need(k - 1)
    assert repeats_at_zero(Contrast(0.0, 0.05, 10.0, groups), delta, ALPHA, even=True) == k + (k % 2)
    assert repeats_at_zero(Contrast(0.0, 0.05, 10.0, groups), 1e-4, ALPHA) is None  # beyond 1000


def test_identical_cells_give_an_exact_answer() -> None:
    same = np.log(np.full(3, 2.0))
    c = contrast(same, same)
    assert c is not None and c.se == 0.0 and c.df is None
    assert p_zero(c) == 1.0 and p_equivalent(c, DELTA) == 0.0
    assert decide(c, None, p_zero(c), RULE).verdict == "reproduced"
    far = contrast(same + 0.5, same)
    assert far is not None and p_zero(far) == 0.0 and decide(far, None, 0.0, RULE).verdict == "inconsistent"
    assert contrast(same[:1], same) is None  # one cell: no test


def test_logs_and_margin() -> None:
    y = logs([1.0, None, 0.0, -2.0, math.e])
    assert np.isnan(y[1:4]).all() and y[0] == 0.0 and y[4] == pytest.approx(1.0)
    assert math.exp(log_margin(0.05)) == pytest.approx(1.05)
