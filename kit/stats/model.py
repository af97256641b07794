"""The comparison model: Welch's t on log per-cell statistics, Holm over a pre-registered family, and the
error-rate guardrail (Fisher's exact test). See docs/statistics.md.

scipy.stats supplies Student's t for fractional (Welch–Satterthwaite) degrees of freedom and Fisher's exact
test; kit's own ``tdist`` only handles integer df.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kit.stats import lazy
from kit.stats.metrics import FArray

HSU_DF = True  # unequal cell counts: Hsu's df min(K_a, K_b) - 1 (docs/statistics.md); False: always Welch–Satterthwaite


def two_sided_p(t: float, df: float) -> float:
    """2 P(T > |t|) for Student's t with (fractional) df: scipy.special.stdtr, what scipy.stats.t.sf computes,
    without the distribution object's argument handling (most of a comparison's time in the simulations)."""
    return float(2 * lazy.special().stdtr(df, -abs(t)))


def t_ppf(q: float, df: float) -> float:
    """The q-quantile of Student's t with (fractional) df: scipy.special.stdtrit, as scipy.stats.t.ppf."""
    return float(lazy.special().stdtrit(df, q))


@dataclass(frozen=True)
class Welch:
    """Arm minus baseline on the log scale: estimate, standard error, Welch–Satterthwaite df, two-sided p."""

    estimate: float
    se: float
    df: float | None
    p: float
    k_arm: int
    k_base: int

    def interval(self, tail: float) -> tuple[float, float]:
        """The symmetric interval estimate ± t(1 - tail/2, df) · se (tail: two-sided, e.g. alpha/m)."""
        if self.se <= 0 or self.df is None:
            return self.estimate, self.estimate
        half = t_ppf(1 - tail / 2, self.df) * self.se
        return self.estimate - half, self.estimate + half


def welch(log_arm: FArray, log_base: FArray) -> Welch | None:
    """Welch's test of mean(log_arm) - mean(log_base); None when either arm has fewer than 2 finite cells."""
    a, b = log_arm[np.isfinite(log_arm)], log_base[np.isfinite(log_base)]
    ka, kb = a.size, b.size
    if ka < 2 or kb < 2:
        return None
    est = float(a.mean() - b.mean())
    wa, wb = float(a.var(ddof=1)) / ka, float(b.var(ddof=1)) / kb
    se = math.sqrt(wa + wb)
    if se <= 0:
        return Welch(est, 0.0, None, 1.0 if est == 0 else 0.0, ka, kb)
    ws = (wa + wb) ** 2 / (wa**2 / (ka - 1) + wb**2 / (kb - 1))
    # With a handful of cells Welch–Satterthwaite is liberal when the smaller arm is the noisier one (its variance
    # rests on 1-2 df; a small draw shrinks the standard error and inflates df: 7.8 % family-wise at 3 vs 2 cells,
    # 6.8 % at 5 vs 3 in tests/stats/sim.py). With unequal cell counts (a failed cell) the df is Hsu's
    # min(K_a, K_b) - 1, which holds the level; with equal counts Welch–Satterthwaite held it in simulation.
    df = float(min(ka, kb) - 1) if HSU_DF and ka != kb else ws
    return Welch(est, se, df, two_sided_p(est / se, df), ka, kb)


def holm_levels(pvalues: Sequence[float], alpha: float, correction: str) -> tuple[list[bool], list[float]]:
    """Per test: rejected, and the two-sided tail of its interval.

    Bonferroni: every tail is alpha/m. Holm: tests sorted by p; the j-th (0-based) is rejected when it and every
    smaller p is at or below alpha/(m - i); rejected tests get the tail of their step, alpha/(m - j), the others
    that of the step where Holm stopped, alpha/(m - r) with r rejections, so an interval excludes the null
    exactly when its test is rejected.
    """
    m = len(pvalues)
    if correction == "bonferroni":
        tail = alpha / max(m, 1)
        return [p <= tail for p in pvalues], [tail] * m
    order = sorted(range(m), key=lambda i: (pvalues[i], i))
    rejected = [False] * m
    r = 0
    for j, i in enumerate(order):
        if pvalues[i] > alpha / (m - j):
            break
        rejected[i] = True
        r = j + 1
    tails = [0.0] * m
    for j, i in enumerate(order):
        tails[i] = alpha / (m - j) if j < r else alpha / (m - r) if r < m else alpha / (m - j)
    return rejected, tails


def fisher_p(failed_a: int, n_a: int, failed_b: int, n_b: int) -> float | None:
    """Two-sided Fisher exact p of the pooled failed/ok counts (None when there is nothing to compare)."""
    if n_a <= 0 or n_b <= 0 or failed_a + failed_b == 0:
        return None
    table = [[failed_a, n_a - failed_a], [failed_b, n_b - failed_b]]
    sps = lazy.stats()

    return float(sps.fisher_exact(table).pvalue)


def blocked(log_arm: FArray, blocks_arm: Sequence[int], log_base: FArray, blocks_base: Sequence[int]) -> Welch | None:
    """The paired t on the per-block differences: in each block holding finite cells of both arms, the mean of the
    arm's log cell statistics minus the baseline's; the estimate is the mean of these differences, its se their SD
    over sqrt(blocks), Student's t with blocks − 1 df. The differences, not the arms, carry the variance, so unequal
    variances of the two arms need no assumption (a pooled residual variance did: tests/stats/test_analysis.py). A
    block missing one arm's cells entirely drops out. None with fewer than 2 such blocks; k_arm, k_base: the cells
    in them."""
    fa, fb = np.isfinite(log_arm), np.isfinite(log_base)
    per_a: dict[int, list[float]] = {}
    per_b: dict[int, list[float]] = {}
    for y, b, f in zip(log_arm, blocks_arm, fa, strict=True):
        if f:
            per_a.setdefault(b, []).append(float(y))
    for y, b, f in zip(log_base, blocks_base, fb, strict=True):
        if f:
            per_b.setdefault(b, []).append(float(y))
    both = sorted(set(per_a) & set(per_b))
    if len(both) < 2:
        return None
    d = np.array([np.mean(per_a[b]) - np.mean(per_b[b]) for b in both])
    ka, kb = sum(len(per_a[b]) for b in both), sum(len(per_b[b]) for b in both)
    est, se = float(d.mean()), float(d.std(ddof=1)) / math.sqrt(d.size)
    if se <= 0:
        return Welch(est, 0.0, None, 1.0 if est == 0 else 0.0, ka, kb)
    df = float(d.size - 1)
    return Welch(est, se, df, two_sided_p(est / se, df), ka, kb)
