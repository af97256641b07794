"""Power of kit's primary comparison: how likely a real effect is called significant, the smallest effect a
design detects with 80 % power (the minimum detectable effect, MDE), and how many repeats a target effect needs.
The method: docs/statistics.md, "Power and the detectable effect".

The model is the test kit runs (``kit.stats.model.welch``): the log per-cell statistics of each arm are normal
with the same between-cell SD σ (from the between-cell coefficient of variation CV of the statistics,
σ² = ln(1 + CV²): σ is CV within 0.1 % of itself up to CV 6 %), the arms differ by δ = log(arm/baseline),
and the test is Welch's t at a two-sided tail (α/m for a family of m: Holm's first step), its df
Welch–Satterthwaite with equal cell counts and Hsu's min(K_a, K_b) − 1 otherwise.

The power is exact for that test, not the textbook noncentral t with df K_a + K_b − 2 (the pooled t's power,
``student_power``): Welch–Satterthwaite's df is itself random and below K_a + K_b − 2, which at 2 cells per arm
turns a textbook 80 % into 48 %. With X, Y the two arms' chi-square sums of squares, R = X / (X + Y) is
Beta((K_a − 1)/2, (K_b − 1)/2) and independent of X + Y; given R the df is fixed and Welch's statistic is
g(R) times a noncentral t with K_a + K_b − 2 df (g = 1 with equal counts), so the power is a one-dimensional
integral over R of ``scipy.stats.nct`` tail probabilities, done by Gauss–Jacobi quadrature.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from kit.stats import lazy
from kit.stats.ab import BLOCK_REPEATS, LevelSamples
from kit.stats.cellstat import MEAN, CellRule, log_values
from kit.stats.metrics import FArray, Metric
from kit.stats.model import HSU_DF

TARGET_POWER = 0.8
# The assumed between-cell CV when nothing is measured, from kit's own measurements (issue 22): 8-14 % between
# cells on an H200 (transformers, eager experts; benchmarks/results/h200-signs-2026-12-02), 30-50 % on a busy 2-core
# machine running kit's CPU engine. A GPU manifest assumes the H200's middle, a CPU one the busy machine's low end.
DEFAULT_CV = 0.10
DEFAULT_CV_CPU = 0.30
DEFAULT_CV_SOURCE = {DEFAULT_CV: "measured 8-14 % between cells on an H200, eager engine",
                     DEFAULT_CV_CPU: "measured 30-50 % on a busy 2-core machine, kit's CPU engine"}
PILOT_CONFIDENCE = 0.8  # a pilot's SD is planned at its upper confidence bound at this level
MIN_CV = 1e-6  # a between-cell CV below this is no variation to plan with (the MDE rounds to 0; below ~1e-154
# the log SD underflows to 0 and the power is undefined): `kit plan` refuses it, assumed or measured
MAX_REPEATS = 100  # per arm: beyond this, `kit plan --target-effect` says the effect is out of reach
QUADRATURE_NODES = 48  # Gauss–Jacobi nodes over R; tests/stats/test_power.py checks against adaptive quadrature
_MAX_LOG_EFFECT = 20.0  # a ratio of e^20: no detectable effect below it means none at all


@functools.cache
def _nodes(k_arm: int, k_base: int) -> tuple[FArray, FArray]:
    """Nodes R in (0, 1) and normalised weights for E[f(R)], R ~ Beta((K_a − 1)/2, (K_b − 1)/2)."""
    special = lazy.special()
    a, b = (k_arm - 1) / 2, (k_base - 1) / 2
    x, w = special.roots_jacobi(QUADRATURE_NODES, b - 1, a - 1)  # weight (1 − x)^(b−1) (1 + x)^(a−1)
    return (1 + x) / 2, w / w.sum()


def _t_ppf(q: float, df: FArray | float) -> FArray:
    """scipy.stats.t.ppf(q, df) for 0 < q < 1 and df > 0: scipy.special.stdtrit, the function it calls
    (``kit.stats.model.t_ppf``, vectorised over df). Through scipy.special, not scipy.stats, whose import costs
    ~0.7 s of CPU that every report's power section paid (tests/stats/test_power.py checks they agree)."""
    out: FArray = lazy.special().stdtrit(df, q)
    return out


def _nct_sf(x: FArray | float, df: float, nc: float) -> FArray:
    """scipy.stats.nct.sf(x, df, nc) for finite x and df > 0 without importing scipy.stats: the ufunc that
    scipy's ``nct._sf`` calls (Boost's complement, scipy.special._ufuncs._nct_sf), clipped to [0, 1] as it clips;
    scipy.stats itself where that ufunc is missing (tests/stats/test_power.py checks they agree)."""
    ufunc = getattr(lazy.special(), "_ufuncs", None)
    nct_sf = getattr(ufunc, "_nct_sf", None)
    if nct_sf is None:
        fallback: FArray = lazy.stats().nct.sf(x, df, nc)
        return fallback
    with np.errstate(over="ignore"):
        out: FArray = np.clip(nct_sf(x, df, nc), 0, 1)
    return out


def _tail_probability(crit: FArray | float, df: float, nc: float) -> FArray:
    """P(|T| > crit) for T noncentral t (df, nc): the upper tail at nc plus the lower, written as the upper at −nc
    (scipy's nct.cdf far in the lower tail returns NaN at large nc; nct.sf at −nc does not)."""
    out: FArray = _nct_sf(crit, df, nc) + _nct_sf(crit, df, -nc)
    return np.clip(out, 0.0, 1.0)


def welch_df(r: FArray | float, k_arm: int, k_base: int) -> FArray:
    """kit's df given the variance share R (Welch–Satterthwaite; Hsu's min − 1 with unequal counts)."""
    r = np.asarray(r, dtype=np.float64)
    if HSU_DF and k_arm != k_base:
        return np.full_like(r, float(min(k_arm, k_base) - 1))
    wa, wb = r / ((k_arm - 1) * k_arm), (1 - r) / ((k_base - 1) * k_base)
    out: FArray = (wa + wb) ** 2 / (wa**2 / (k_arm - 1) + wb**2 / (k_base - 1))
    return out


def blocked_df(k_arm: int, k_base: int, block_repeats: int = BLOCK_REPEATS) -> int:
    """The df of kit's blocked (paired) t with repeats 1..K of each arm: the blocks holding both arms minus 1."""
    blocks = math.ceil(min(k_arm, k_base) / block_repeats)
    return blocks - 1


def blocked_power(effect: float, sd: float, k_arm: int, k_base: int, tail: float, df: int | None = None) -> float:
    """P(kit's blocked test rejects at two-sided ``tail``): Student's t with the residual df (``df``, default
    ``blocked_df``: complete blocks) and se = sd·sqrt(2/min(K_a, K_b)), the paired t's, exact for complete blocks
    when ``sd`` is the within-block (residual) SD: SD(block difference)/sqrt(2)."""
    df = blocked_df(k_arm, k_base) if df is None else df
    if df < 1:
        return 0.0
    nc = abs(effect) / (sd * math.sqrt(2 / min(k_arm, k_base)))
    return float(_tail_probability(float(_t_ppf(1 - tail / 2, df)), df, nc))


def power(effect: float, sd: float, k_arm: int, k_base: int, tail: float, method: str = "welch",
          df: int | None = None) -> float:
    """P(kit's test rejects at two-sided ``tail``) when log(arm/baseline) = ``effect`` and the log cell
    statistics have SD ``sd`` in both arms (``method`` blocked: the within-block SD, ``blocked_power``); 0 with
    fewer than 2 cells in an arm (kit gives no verdict then)."""
    if sd <= 0 or not 0 < tail < 1:
        raise ValueError("sd must be > 0 and tail in (0, 1)")
    if k_arm < 2 or k_base < 2:
        return 0.0
    if method == "blocked":
        return blocked_power(effect, sd, k_arm, k_base, tail, df)
    nu = k_arm + k_base - 2
    q = 1 / k_arm + 1 / k_base
    nc = abs(effect) / (sd * math.sqrt(q))
    r, w = _nodes(k_arm, k_base)
    h = r / ((k_arm - 1) * k_arm) + (1 - r) / ((k_base - 1) * k_base)  # se² / (σ² χ²_ν)
    g = np.sqrt(q / (nu * h))  # Welch's statistic = g(R) × a noncentral t with ν df
    crit = _t_ppf(1 - tail / 2, welch_df(r, k_arm, k_base)) / g
    return float(np.dot(w, _tail_probability(crit, nu, nc)))


def student_power(effect: float, sd: float, k_arm: int, k_base: int, tail: float) -> float:
    """The textbook power of the pooled (Student) t: noncentral t with K_a + K_b − 2 df (statsmodels'
    TTestIndPower); above kit's Welch power at few cells, shown for comparison in docs/statistics.md."""
    nu = k_arm + k_base - 2
    nc = abs(effect) / (sd * math.sqrt(1 / k_arm + 1 / k_base))
    return float(_tail_probability(float(_t_ppf(1 - tail / 2, nu)), nu, nc))


def mde(sd: float, k_arm: int, k_base: int, tail: float, target: float = TARGET_POWER,
        method: str = "welch", df: int | None = None) -> float | None:
    """The smallest |log(arm/baseline)| detected with probability ``target`` (None: fewer than 2 cells)."""
    optimize = lazy.optimize()
    if k_arm < 2 or k_base < 2 or not math.isfinite(sd) or sd <= 0:  # an interval too wide to write has no SD
        return None

    def gap(d: float) -> float:
        return power(d, sd, k_arm, k_base, tail, method, df) - target

    hi = sd
    while gap(hi) < 0:
        hi *= 2
        if hi > _MAX_LOG_EFFECT:
            return None
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-12, rtol=1e-10))


def repeats_needed(effect: float, sd: float, tail: float, *, target: float = TARGET_POWER,
                   even: bool = False, max_repeats: int = MAX_REPEATS, method: str = "welch") -> int | None:
    """The smallest number of cells per arm (even when ``even``) whose power for ``effect`` reaches ``target``;
    None when even ``max_repeats`` fall short. Power grows with the cells, so this bisects."""
    step = 2 if even else 1
    lo, hi = 2 // step - 1, max_repeats // step  # k = j × step; j = lo is known to fall short (k < 2)
    if power(effect, sd, hi * step, hi * step, tail, method) < target:
        return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power(effect, sd, mid * step, mid * step, tail, method) >= target:
            hi = mid
        else:
            lo = mid
    return hi * step


def pooled_log_sd(groups: Iterable[FArray]) -> tuple[float, int] | None:
    """The pooled within-group SD of log values and its df (None without any df); non-finite values dropped."""
    ss, df = 0.0, 0
    for g in groups:
        x = np.asarray(g, dtype=np.float64)
        x = x[np.isfinite(x)]
        if x.size >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            df += x.size - 1
    return (math.sqrt(ss / df), df) if df else None


def log_cell_stats(ls: LevelSamples, metric: Metric, rule: CellRule = MEAN) -> dict[str, FArray]:
    """Per arm, the finite log cell statistics of ``metric`` at one level (the values kit's test compares)."""
    out: dict[str, FArray] = {}
    for arm, cells in ls.arms.items():
        if not cells:
            out[arm] = np.zeros(0)
            continue
        logs = log_values(cells, metric, rule)
        out[arm] = logs[np.isfinite(logs)]
    return out


def sd_from_interval(ratio_ci: Sequence[float], df: float, confidence: float, k_arm: int,
                     k_base: int) -> float | None:
    """The between-cell SD implied by a comparison's symmetric log interval: se = log(hi/lo) / (2 t), then
    se / sqrt(1/K_a + 1/K_b) (with equal counts exactly the pooled within-arm SD)."""
    lo, hi = ratio_ci
    if not (lo > 0 and hi > lo and df > 0 and 0 < confidence < 1 and k_arm >= 2 and k_base >= 2):
        return None
    se = math.log(hi / lo) / (2 * float(_t_ppf(1 - (1 - confidence) / 2, df)))
    return se / math.sqrt(1 / k_arm + 1 / k_base)


def default_cv(gpus: bool) -> float:
    """The CV assumed without --cv or --pilot: DEFAULT_CV for a manifest that uses GPUs, else DEFAULT_CV_CPU."""
    return DEFAULT_CV if gpus else DEFAULT_CV_CPU


def sd_upper_bound(sd: float, df: int, confidence: float = PILOT_CONFIDENCE) -> float:
    """The one-sided upper ``confidence`` bound on a normal SD estimated as ``sd`` on ``df`` degrees of freedom:
    (df s² / σ²) is chi-square with df, so σ <= s sqrt(df / chi2.ppf(1 - confidence, df)) with that confidence. A
    2-repeat pilot (few df) is planned well above its estimate; one with many cells, close to it."""
    sps = lazy.stats()
    if sd <= 0 or df < 1 or not 0 < confidence < 1:
        raise ValueError("sd must be > 0, df >= 1 and confidence in (0, 1)")
    return sd * math.sqrt(df / float(sps.chi2.ppf(1 - confidence, df)))


def sd_from_cv(cv: float) -> float:
    """The SD of the logs of a lognormal variable with coefficient of variation ``cv``: sqrt(ln(1 + cv²))."""
    return math.sqrt(math.log1p(cv**2))


def _expm1(x: float) -> float:
    """e^x − 1, infinite past what a float holds (a bundle's figures may be absurd: 1e308 ns)."""
    try:
        return math.expm1(x)
    except OverflowError:
        return math.inf


def cv_from_sd(sd: float) -> float:
    """The coefficient of variation of a lognormal variable whose logs have SD ``sd``: sqrt(e^(sd²) − 1)."""
    return math.sqrt(_expm1(sd**2)) if not abs(sd) >= 1e150 else math.inf  # NaN stays NaN


def percent_up(log_effect: float) -> float:
    """The increase a log effect means, in percent (e^δ − 1)."""
    return 100 * _expm1(log_effect)


def percent_down(log_effect: float) -> float:
    """The decrease a log effect means, in percent (1 − e^−δ)."""
    return -100 * _expm1(-log_effect)
