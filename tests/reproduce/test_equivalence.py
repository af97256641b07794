"""kit.reproduce.equivalence against computations kit did not write: scipy's Welch t-tests (TOST and the
minimum-effect test built from ``scipy.stats.ttest_ind`` on shifted samples), Student's t with Hsu's df, and the
four-group Welch–Satterthwaite df written out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from kit.reproduce.equivalence import (
    Contrast,
    contrast,
    difference,
    equivalence,
    log_margin,
    logs,
    repeats_needed,
)

DELTA = math.log(1.05)
ALPHA = 0.05


def _scipy_tost(new: np.ndarray, orig: np.ndarray, delta: float) -> tuple[float, float]:
    """(p TOST, p minimum-effect) from scipy's Welch test on shifted samples: H0 d <= -delta is
    ttest_ind(new + delta, orig, greater), H0 d >= delta is ttest_ind(new - delta, orig, less)."""
    p_low = sps.ttest_ind(new + delta, orig, equal_var=False, alternative="greater").pvalue
    p_high = sps.ttest_ind(new - delta, orig, equal_var=False, alternative="less").pvalue
    p_above = sps.ttest_ind(new - delta, orig, equal_var=False, alternative="greater").pvalue  # d > delta
    p_below = sps.ttest_ind(new + delta, orig, equal_var=False, alternative="less").pvalue  # d < -delta
    return float(max(p_low, p_high)), float(min(p_above, p_below))


@pytest.mark.parametrize("seed", range(40))
def test_tost_equals_scipy_welch_on_equal_cell_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 9))
    orig = rng.normal(0.0, rng.uniform(0.005, 0.08), k)
    new = rng.normal(rng.uniform(-0.12, 0.12), rng.uniform(0.005, 0.08), k)
    c = contrast(new, orig)
    assert c is not None
    eq = equivalence(c, DELTA, ALPHA)
    p_eq, p_diff = _scipy_tost(new, orig, DELTA)
    assert eq.p_equivalent == pytest.approx(p_eq, rel=1e-9, abs=1e-12)
    assert eq.p_different == pytest.approx(p_diff, rel=1e-9, abs=1e-12)
    expected = "reproduced" if p_eq < ALPHA else "not_reproduced" if p_diff < ALPHA else "inconclusive"
    assert eq.decision == expected
    # the decision is the (1 - 2 alpha) interval against the margin
    inside = eq.low > -DELTA and eq.high < DELTA
    outside = eq.low > DELTA or eq.high < -DELTA
    assert (eq.decision == "reproduced") == inside and (eq.decision == "not_reproduced") == outside


def test_the_three_decisions_occur_and_identical_numbers_reproduce() -> None:
    rng = np.random.default_rng(1)
    orig = rng.normal(0.0, 0.01, 6)
    same = equivalence(contrast(orig.copy(), orig), DELTA, ALPHA)  # type: ignore[arg-type]
    assert same.decision == "reproduced" and same.estimate == 0.0
    slower = equivalence(contrast(orig + math.log(1.3), orig), DELTA, ALPHA)  # type: ignore[arg-type]
    assert slower.decision == "not_reproduced" and math.exp(slower.estimate) == pytest.approx(1.3)
    noisy = rng.normal(0.0, 0.2, 3)
    assert equivalence(contrast(noisy, orig[:3]), DELTA, ALPHA).decision == "inconclusive"  # type: ignore[arg-type]


def test_unequal_cell_counts_use_hsus_df_like_kits_ab_test() -> None:
    rng = np.random.default_rng(7)
    orig, new = rng.normal(0, 0.03, 5), rng.normal(0.02, 0.05, 3)
    c = contrast(new, orig)
    assert c is not None and c.df == 2.0  # min(5, 3) - 1
    se = math.sqrt(new.var(ddof=1) / 3 + orig.var(ddof=1) / 5)
    d = new.mean() - orig.mean()
    p_low = sps.t.sf((d + DELTA) / se, 2)
    p_high = sps.t.cdf((d - DELTA) / se, 2)
    eq = equivalence(c, DELTA, ALPHA)
    assert eq.p_equivalent == pytest.approx(max(p_low, p_high), rel=1e-12)
    assert eq.high - eq.estimate == pytest.approx(sps.t.ppf(0.95, 2) * se, rel=1e-12)


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


def test_repeats_needed_is_the_first_number_that_decides() -> None:
    rng = np.random.default_rng(11)
    orig, new = rng.normal(0, 0.06, 3), rng.normal(0.01, 0.06, 3)
    c = contrast(new, orig)
    assert c is not None and equivalence(c, DELTA, ALPHA).decision == "inconclusive"
    k = repeats_needed(c, DELTA, ALPHA)
    assert k is not None and k > 3

    def at(n: int) -> str:  # the same estimate and variances with n cells in every group
        total = sum(v for v, _ in c.groups)
        df = (n - 1) * total**2 / sum(v * v for v, _ in c.groups)
        return equivalence(Contrast(c.estimate, math.sqrt(total / n), df, c.groups), DELTA, ALPHA).decision

    assert at(k) != "inconclusive" and at(k - 1) == "inconclusive"
    assert repeats_needed(c, DELTA, ALPHA, even=True) == k + (k % 2)
    at_margin = Contrast(DELTA, c.se, c.df, c.groups)
    assert repeats_needed(at_margin, DELTA, ALPHA) is None


def test_identical_cells_give_an_exact_answer() -> None:
    same = np.log(np.full(3, 2.0))
    c = contrast(same, same)
    assert c is not None and c.se == 0.0 and c.df is None
    eq = equivalence(c, DELTA, ALPHA)
    assert eq.decision == "reproduced" and eq.p_equivalent == 0.0
    far = contrast(same + 0.5, same)
    assert far is not None and equivalence(far, DELTA, ALPHA).decision == "not_reproduced"
    assert contrast(same[:1], same) is None  # one cell: no test


def test_logs_and_margin() -> None:
    y = logs([1.0, None, 0.0, -2.0, math.e])
    assert np.isnan(y[1:4]).all() and y[0] == 0.0 and y[4] == pytest.approx(1.0)
    assert math.exp(log_margin(0.05)) == pytest.approx(1.05)
