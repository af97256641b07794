"""Two runs on the log scale: the test of no difference (the new run inside the original's prediction interval),
TOST within a margin, and how many repeats would show equivalence if nothing changed. The method: docs/reproduce.md.

The contrasts are kit's own A/B machinery under the original's pre-registered analysis.method: ``welch``
(``kit.stats.model.welch``: Welch's t on log cell statistics, Welch–Satterthwaite df, Hsu's df for unequal cell
counts) or ``blocked`` (``kit.stats.model.blocked``: least squares with a fixed effect per ABBA block, Student's t
on the residual df). A difference of two independent contrasts (the A/B effect of the new run against the
original's) adds their variances, with Satterthwaite's df for the sum (each contrast's own df: Welch's or the
residual df): with Welch and equal cell counts that is exactly the Welch–Satterthwaite df of the four groups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kit.stats import lazy
from kit.stats.metrics import FArray
from kit.stats.model import Welch, blocked, welch

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


def contrast(log_a: FArray, log_b: FArray, blocks: tuple[Sequence[int], Sequence[int]] | None = None,
             ) -> Contrast | None:
    """log_a against log_b: mean(log_a) - mean(log_b) by Welch's t (kit.stats.model.welch), or with ``blocks``
    (each cell's ABBA block, kit.stats.ab.block_of_repeat) the blocked estimate (kit.stats.model.blocked); None with
    too few cells. A blocked contrast's groups carry the residual variance (its SE is that SD times
    sqrt(1/k_a + 1/k_b) in a balanced design), so the repeats figure plans on the within-block spread."""
    if blocks is not None:
        w: Welch | None = blocked(log_a, blocks[0], log_b, blocks[1])
        if w is None:
            return None
        s2 = w.se**2 / (1 / w.k_arm + 1 / w.k_base)
        return Contrast(w.estimate, w.se, w.df, ((s2, w.k_arm), (s2, w.k_base)))
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


def _p_beyond(t: float, df: float | None, upper: bool) -> float:
    """P(T >= t) (upper) or P(T <= t), Student's t with ``df``; a degenerate contrast (no spread) is certain."""
    special = lazy.special()
    if df is None or math.isinf(t):
        return 0.0 if (t > 0) == upper else 1.0
    return float(special.stdtr(df, -t if upper else t))  # Student's t CDF (the ufunc: fast inside simulations)


def _t(c: Contrast, x: float) -> float:
    """(estimate - x) / se; +-inf (or 0) for a contrast without spread."""
    if c.se > 0 and c.df is not None:
        return (c.estimate - x) / c.se
    gap = c.estimate - x
    return math.copysign(math.inf, gap) if gap else 0.0


def p_zero(c: Contrast) -> float:
    """Two-sided p of H0: d = 0 (Welch's t with the contrast's df): below alpha exactly when the new run lies
    outside the original's (1 - alpha) prediction interval."""
    t = _t(c, 0.0)
    if t == 0.0:
        return 1.0
    return min(1.0, 2 * _p_beyond(abs(t), c.df if c.se > 0 else None, upper=True))


def interval(c: Contrast, confidence: float) -> tuple[float, float]:
    """The two-sided ``confidence`` interval estimate +- t((1 + confidence) / 2, df) * se."""
    special = lazy.special()
    half = float(special.stdtrit(c.df, (1 + confidence) / 2)) * c.se if c.se > 0 and c.df is not None else 0.0
    return c.estimate - half, c.estimate + half


def p_sides(c: Contrast, delta: float) -> tuple[float, float]:
    """TOST's two one-sided p-values: of H0: d <= -delta (against d > -delta) and of H0: d >= delta."""
    df = c.df if c.se > 0 else None
    return _p_beyond(_t(c, -delta), df, upper=True), _p_beyond(_t(c, delta), df, upper=False)


def p_equivalent(c: Contrast, delta: float) -> float:
    """TOST (Schuirmann 1987) of H0: |d| >= delta, the larger of the two one-sided p-values: below alpha exactly when
    the (1 - 2 alpha) interval lies inside (-delta, delta)."""
    return max(p_sides(c, delta))


def pooled_sd(c: Contrast) -> float:
    """The between-cell SD (log scale) pooled over the contrast's groups, each weighted by its df."""
    dfs = sum(n - 1 for _, n in c.groups)
    return math.sqrt(sum((n - 1) * v for v, n in c.groups) / dfs) if dfs > 0 else 0.0


def repeats_at_zero(c: Contrast, delta: float, alpha: float, *, power: float = 0.8, even: bool = False,
                    ) -> int | None:
    """Prospective: the fewest cells per group (each arm in each run) for which TOST at ``delta`` has ``power`` when
    the true difference is 0, with the groups' pooled SD: delta >= (t(1 - alpha, df) + t(1 - (1 - power) / 2, df))
    * sd * sqrt(groups / k), df = groups * (k - 1). Never from the observed difference. None when more than
    MAX_REPEATS would be needed; ``even``: rounded up to an even number (ABBA blocks)."""
    special = lazy.special()
    sd, g = pooled_sd(c), len(c.groups)
    if sd <= 0:
        return 2

    def enough(k: int) -> bool:  # the margin against the spread at k cells per group; monotone in k
        df = g * (k - 1)
        t = float(special.stdtrit(df, 1 - alpha) + special.stdtrit(df, 1 - (1 - power) / 2))
        return t * sd * math.sqrt(g / k) <= delta

    if not enough(MAX_REPEATS):
        return None
    low, high = 1, MAX_REPEATS  # enough(high), and low < 2 stands for "not enough"
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high + (high % 2) if even else high


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
