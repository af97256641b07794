"""kit.stats.power against things it did not compute: a Monte Carlo of the test kit runs (scipy's Welch t, or
Hsu's df written out with numpy), adaptive quadrature, and statsmodels' textbook power where it is installed."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate
from scipy import stats as sps

from kit.stats import power
from kit.stats.power import (
    mde,
    pooled_log_sd,
    repeats_needed,
    sd_from_interval,
    student_power,
    welch_df,
)

DRAWS = 4000


def _binomial_tolerance(p: float, n: int = DRAWS) -> float:
    """Four binomial standard errors (seeded draws: deterministic, and a real error of a few points still fails)."""
    return 4 * math.sqrt(p * (1 - p) / n) + 1e-3


def _welch_rejections(effect: float, sd: float, ka: int, kb: int, tail: float, seed: int) -> float:
    """Share of simulated experiments in which scipy's Welch t (equal counts) or Hsu's df (unequal) rejects."""
    rng = np.random.default_rng(seed)
    a = rng.normal(effect, sd, (DRAWS, ka))
    b = rng.normal(0.0, sd, (DRAWS, kb))
    if ka == kb:
        p = sps.ttest_ind(a, b, axis=1, equal_var=False).pvalue
    else:
        se = np.sqrt(a.var(axis=1, ddof=1) / ka + b.var(axis=1, ddof=1) / kb)
        t = (a.mean(axis=1) - b.mean(axis=1)) / se
        p = 2 * sps.t.sf(np.abs(t), min(ka, kb) - 1)
    return float(np.mean(p <= tail))


@pytest.mark.parametrize(("k", "tail", "effect"), [
    (2, 0.05, 0.20), (3, 0.0125, 0.12), (3, 0.05, 0.06), (4, 0.0125, 0.08), (6, 0.0125, 0.05), (10, 0.05, 0.03),
])
def test_power_matches_a_monte_carlo_of_welchs_t(k: int, tail: float, effect: float) -> None:
    exact = power.power(effect, 0.03, k, k, tail)
    simulated = _welch_rejections(effect, 0.03, k, k, tail, seed=k * 1000 + int(effect * 100))
    assert abs(simulated - exact) <= _binomial_tolerance(exact), (exact, simulated)


@pytest.mark.parametrize(("ka", "kb", "effect"), [(3, 2, 0.3), (5, 3, 0.1), (2, 6, 0.25)])
def test_power_with_unequal_counts_matches_a_monte_carlo_of_hsus_df(ka: int, kb: int, effect: float) -> None:
    exact = power.power(effect, 0.03, ka, kb, 0.05)
    simulated = _welch_rejections(effect, 0.03, ka, kb, 0.05, seed=ka * 10 + kb)
    assert abs(simulated - exact) <= _binomial_tolerance(exact), (exact, simulated)


def test_the_textbook_power_overstates_welchs_at_few_cells() -> None:
    """The noncentral t with df 2K-2 is the pooled t's power; the same Monte Carlo tells it apart from kit's."""
    d = mde(0.03, 2, 2, 0.05)
    assert d is not None
    simulated = _welch_rejections(d, 0.03, 2, 2, 0.05, seed=7)
    assert abs(simulated - 0.8) <= _binomial_tolerance(0.8)
    assert student_power(d, 0.03, 2, 2, 0.05) - simulated > 5 * _binomial_tolerance(0.8)  # 0.995 vs 0.80
    rng = np.random.default_rng(8)  # ... and it is right for the pooled t
    a, b = rng.normal(0.05, 0.03, (DRAWS, 3)), rng.normal(0.0, 0.03, (DRAWS, 3))
    pooled = float(np.mean(sps.ttest_ind(a, b, axis=1, equal_var=True).pvalue <= 0.05))
    textbook = student_power(0.05, 0.03, 3, 3, 0.05)
    assert abs(pooled - textbook) <= _binomial_tolerance(textbook)


@pytest.mark.parametrize(("ka", "kb"), [(2, 2), (3, 3), (6, 6), (3, 2), (2, 7)])
def test_gauss_jacobi_equals_adaptive_quadrature(ka: int, kb: int) -> None:
    """The one-dimensional integral over the variance share R, done again with scipy's adaptive quad."""
    effect, sd, tail = 0.08, 0.03, 0.0125
    nu, q = ka + kb - 2, 1 / ka + 1 / kb
    nc = effect / (sd * math.sqrt(q))

    def integrand(r: float) -> float:
        h = r / ((ka - 1) * ka) + (1 - r) / ((kb - 1) * kb)
        crit = float(sps.t.ppf(1 - tail / 2, welch_df(r, ka, kb))) / math.sqrt(q / (nu * h))
        return float(sps.nct.sf(crit, nu, nc) + sps.nct.sf(crit, nu, -nc))

    a, b = (ka - 1) / 2, (kb - 1) / 2
    val, _ = integrate.quad(integrand, 0, 1, weight="alg", wvar=(a - 1, b - 1), epsabs=1e-11, epsrel=1e-9)
    assert power.power(effect, sd, ka, kb, tail) == pytest.approx(val / math.exp(math.lgamma(a) + math.lgamma(b)
                                                                                 - math.lgamma(a + b)), abs=1e-7)


def test_textbook_power_equals_the_noncentral_t() -> None:
    """The two-sample t's power from scipy's noncentral t written out here (what statsmodels' TTestIndPower
    computes: P(|T'| > t_crit) with T' ~ t(n1 + n2 - 2, d * sqrt(n1 n2 / (n1 + n2))))."""
    for k, kb, effect, tail in ((3, 3, 0.05, 0.05), (6, 6, 0.04, 0.0125), (4, 8, 0.06, 0.01)):
        df, nc = k + kb - 2, effect / 0.03 * math.sqrt(k * kb / (k + kb))
        crit = float(sps.t.ppf(1 - tail / 2, df))
        expected = float(sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc))
        assert student_power(effect, 0.03, k, kb, tail) == pytest.approx(expected, abs=1e-9)


def test_mde_round_trips_and_shrinks_with_repeats() -> None:
    last = math.inf
    for k in range(2, 21):
        d = mde(0.03, k, k, 0.0125)
        assert d is not None
        assert power.power(d, 0.03, k, k, 0.0125) == pytest.approx(power.TARGET_POWER, abs=1e-8)
        assert d < last
        last = d
    d = mde(0.03, 6, 6, 0.0125)
    assert d is not None and mde(0.06, 6, 6, 0.0125) == pytest.approx(2 * d, rel=1e-8)  # scale-free
    assert mde(0.03, 1, 6, 0.05) is None and power.power(0.5, 0.03, 1, 6, 0.05) == 0.0  # no verdict at 1 cell
    assert mde(0.03, 6, 6, 0.05) < mde(0.03, 6, 6, 0.0125)  # type: ignore[operator]  # a bigger family costs


def test_repeats_needed_is_the_smallest_that_reaches_80_percent() -> None:
    for effect in (math.log(1.05), math.log(1.1), math.log(1.3)):
        k = repeats_needed(effect, 0.03, 0.0125)
        assert k is not None
        assert power.power(effect, 0.03, k, k, 0.0125) >= 0.8 > power.power(effect, 0.03, k - 1, k - 1, 0.0125)
        even = repeats_needed(effect, 0.03, 0.0125, even=True)
        assert even is not None and even % 2 == 0 and even in (k, k + 1)
    assert repeats_needed(math.log(1.01), 0.03, 0.0125) is None  # beyond MAX_REPEATS
    assert repeats_needed(math.log(3.0), 0.03, 0.05) == 2


def test_pooled_log_sd_and_cv_conversion() -> None:
    rng = np.random.default_rng(3)
    groups = [rng.normal(0, 0.05, 4), rng.normal(1, 0.05, 6), np.array([2.0]), np.array([np.nan, 0.1, 0.2])]
    ss = sum(float(((g - g.mean()) ** 2).sum()) for g in (groups[0], groups[1], groups[3][1:]))
    got = pooled_log_sd(groups)
    assert got is not None and got[1] == 3 + 5 + 1 and got[0] == pytest.approx(math.sqrt(ss / 9), rel=1e-12)
    assert pooled_log_sd([np.array([1.0])]) is None
    assert power.cv_from_sd(power.sd_from_cv(0.47)) == pytest.approx(0.47, rel=1e-12)
    x = np.exp(rng.normal(0, power.sd_from_cv(0.3), 200_000))
    assert x.std() / x.mean() == pytest.approx(0.3, rel=0.02)


def test_sd_read_back_from_an_interval() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(0.1, 0.04, 5), rng.normal(0.0, 0.04, 5)
    res = sps.ttest_ind(a, b, equal_var=False)
    ci = res.confidence_interval(0.975)
    sd = sd_from_interval([math.exp(ci.low), math.exp(ci.high)], float(res.df), 0.975, 5, 5)
    pooled = pooled_log_sd([a, b])
    assert sd is not None and pooled is not None and sd == pytest.approx(pooled[0], rel=1e-10)
    assert sd_from_interval([1.0, 1.0], 4.0, 0.95, 3, 3) is None


def test_the_scipy_special_quantile_and_tail_are_scipy_stats_own() -> None:
    """The t quantile and the noncentral t tail the power takes through scipy.special (not scipy.stats, whose import
    a report paid) are bit for bit scipy.stats.t.ppf and scipy.stats.nct.sf, on the values the power code passes:
    arrays of fractional df, scalars, both signs of nc, far tails."""
    qs = [0.5 + 1e-9, 0.6, 0.9, 0.975, 0.99, 1 - 0.05 / 24, 1 - 1e-9]
    dfs = np.array([0.5, 1.0, 1.37, 2.0, 3.5, 7.0, 29.9, 250.0, 1e5])
    for q in qs:
        np.testing.assert_array_equal(power._t_ppf(q, dfs), sps.t.ppf(q, dfs))
        for df in dfs:
            assert float(power._t_ppf(q, float(df))) == float(sps.t.ppf(q, float(df)))
    xs = np.array([-50.0, -3.0, -0.1, 0.0, 0.4, 1.96, 4.3, 12.0, 80.0])
    for df in (1.0, 2.0, 3.7, 10.0, 58.0):
        for nc in (0.0, 0.3, -0.3, 2.5, -2.5, 9.0, -9.0, 40.0, -40.0):
            np.testing.assert_array_equal(power._nct_sf(xs, df, nc), sps.nct.sf(xs, df, nc))
            assert float(power._nct_sf(2.1, df, nc)) == float(sps.nct.sf(2.1, df, nc))


def test_a_report_power_section_needs_no_scipy_stats() -> None:
    """What a report computes (the read-back SD, the MDE under both tests) imports scipy.special and scipy.optimize,
    never scipy.stats (~0.7 s of CPU at every run's end)."""
    import subprocess
    import sys

    code = ("import sys; from kit.stats import power; "
            "sd = power.sd_from_interval([0.9, 1.1], 5.3, 0.95, 3, 3); "
            "assert power.mde(sd, 3, 3, 0.025) and power.mde(sd, 4, 4, 0.025, method='blocked', df=1); "
            "print('scipy.stats' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False", r.stdout + r.stderr
