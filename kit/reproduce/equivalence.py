"""Equivalence of two runs on the log scale: TOST and the minimum-effect test on a Welch contrast, and how many
repeats an undecided interval would need. The method: docs/reproduce.md.

The contrasts are kit's own A/B machinery (``kit.stats.model.welch``: Welch's t on log cell statistics, Welch–
Satterthwaite df, Hsu's df for unequal cell counts). A difference of two independent contrasts (the A/B effect of
the new run against the original's) adds their variances, with Satterthwaite's df for the sum: with equal cell
counts that is exactly the Welch–Satterthwaite df of the four groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from kit.files.reproduce import Verdict
from kit.stats.metrics import FArray
from kit.stats.model import welch

MAX_REPEATS = 1000  # design.repeats' own upper bound


@dataclass(frozen=True)
class Contrast:
    """A difference of means of log cell statistics: estimate, standard error, df (None: no spread at all), and
    the groups' (sample variance, cells) that make it up, for planning repeats."""

    estimate: float
    se: float
    df: float | None
    groups: tuple[tuple[float, int], ...]


def _finite(x: FArray) -> FArray:
    out: FArray = x[np.isfinite(x)]
    return out


def contrast(log_a: FArray, log_b: FArray) -> Contrast | None:
    """mean(log_a) - mean(log_b) by Welch's t (kit.stats.model.welch); None with fewer than 2 finite cells."""
    w = welch(log_a, log_b)
    if w is None:
        return None
    a, b = _finite(log_a), _finite(log_b)
    groups = ((float(a.var(ddof=1)), int(a.size)), (float(b.var(ddof=1)), int(b.size)))
    return Contrast(w.estimate, w.se, w.df, groups)


def difference(new: Contrast, original: Contrast) -> Contrast:
    """new - original for two independent contrasts: variances add; Satterthwaite's df for the sum."""
    var = new.se**2 + original.se**2
    parts = [(c.se**2) ** 2 / c.df for c in (new, original) if c.df is not None and c.se > 0]
    df = var**2 / sum(parts) if parts and var > 0 else None
    return Contrast(new.estimate - original.estimate, math.sqrt(var), df, new.groups + original.groups)


@dataclass(frozen=True)
class Equivalence:
    """The two tests at level alpha on one contrast, with margin ``delta`` on the log scale (log(1 + margin)).

    ``p_equivalent`` (TOST) is below alpha exactly when the (1 - 2 alpha) interval lies inside (-delta, delta);
    ``p_different`` (the minimum-effect test on the estimate's side) exactly when it lies outside [-delta, delta]."""

    estimate: float
    low: float
    high: float
    p_equivalent: float
    p_different: float
    decision: Verdict


def _p_beyond(t: float, df: float | None, upper: bool) -> float:
    """P(T >= t) (upper) or P(T <= t), Student's t with ``df``; a degenerate contrast (no spread) is certain."""
    if df is None or math.isinf(t):
        return 0.0 if (t > 0) == upper else 1.0
    return float(sps.t.sf(t, df) if upper else sps.t.cdf(t, df))


def equivalence(c: Contrast, delta: float, alpha: float) -> Equivalence:
    """TOST (H0: |d| >= delta) and the minimum-effect test (H0: |d| <= delta), each one-sided at ``alpha``."""
    est, se = c.estimate, c.se
    if se > 0 and c.df is not None:
        half = float(sps.t.ppf(1 - alpha, c.df)) * se
        t_low, t_high = (est + delta) / se, (est - delta) / se
    else:  # identical cells in every group: the estimate is exact
        half = 0.0
        t_low = math.copysign(math.inf, est + delta) if est + delta else 0.0
        t_high = math.copysign(math.inf, est - delta) if est - delta else 0.0
    df = c.df if se > 0 else None
    p_above_low = _p_beyond(t_low, df, upper=True)  # H0: d <= -delta
    p_below_high = _p_beyond(t_high, df, upper=False)  # H0: d >= +delta
    p_eq = max(p_above_low, p_below_high)
    p_diff = min(_p_beyond(t_high, df, upper=True), _p_beyond(t_low, df, upper=False))  # d > delta or d < -delta
    decision: Verdict
    if p_eq < alpha:
        decision = "reproduced"
    elif p_diff < alpha:
        decision = "not_reproduced"
    else:
        decision = "inconclusive"
    return Equivalence(est, est - half, est + half, p_eq, p_diff, decision)


def repeats_needed(c: Contrast, delta: float, alpha: float, *, even: bool = False) -> int | None:
    """The fewest cells per group (each arm in each run) for which the (1 - 2 alpha) interval, with the observed
    estimate and variances, would fall wholly inside or wholly outside the margin; None when more than MAX_REPEATS
    would be needed (the estimate is close to the margin, or the cells vary too much). ``even``: round up to an even
    number (ABBA blocks)."""
    gap = abs(abs(c.estimate) - delta)
    total = sum(v for v, _ in c.groups)
    if total <= 0:
        return 2
    if gap <= 0:
        return None
    squares = sum(v * v for v, _ in c.groups)
    k = np.arange(2, MAX_REPEATS + 1)
    df = (k - 1) * total**2 / squares  # Welch–Satterthwaite with k cells in every group
    decides = np.flatnonzero(sps.t.ppf(1 - alpha, df) * np.sqrt(total / k) < gap)
    if decides.size == 0:
        return None
    first = int(k[decides[0]])
    return first + (first % 2) if even else first


def holm_adjusted(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the j-th smallest (0-based) times m - j, made
    non-decreasing along the order, capped at 1 (as statsmodels' ``multipletests(method="holm")``). Comparing each to
    alpha is Holm's procedure: the family's chance of any false rejection is at most alpha."""
    m = len(pvalues)
    out = [1.0] * m
    running = 0.0
    for j, i in enumerate(sorted(range(m), key=lambda i: (pvalues[i], i))):
        running = max(running, min(1.0, (m - j) * pvalues[i]))
        out[i] = running
    return out


def log_margin(margin: float) -> float:
    """The margin on the log scale: ratios within [1/(1 + margin), 1 + margin] are equivalent."""
    return math.log1p(margin)


def logs(values: Sequence[float | None]) -> FArray:
    """Natural logs of cell statistics; missing, zero and negative values become NaN (dropped by the tests)."""
    arr = np.array([np.nan if v is None or v <= 0 else v for v in values], dtype=np.float64)
    out: FArray = np.log(arr)
    return out
