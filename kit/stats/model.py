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

from kit.stats.metrics import FArray

HSU_DF = True  # unequal cell counts: Hsu's df min(K_a, K_b) - 1 (docs/statistics.md); False: always Welch–Satterthwaite


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
        from scipy import stats as sps  # here, not at the top: ~0.4 s of CPU that every `python -m kit` start paid

        if self.se <= 0 or self.df is None:
            return self.estimate, self.estimate
        half = float(sps.t.ppf(1 - tail / 2, self.df)) * self.se
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
    from scipy import stats as sps

    p = float(2 * sps.t.sf(abs(est) / se, df))
    return Welch(est, se, df, p, ka, kb)


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
    from scipy import stats as sps

    return float(sps.fisher_exact(table).pvalue)


def blocked(log_arm: FArray, blocks_arm: Sequence[int], log_base: FArray, blocks_base: Sequence[int]) -> Welch | None:
    """The arm effect with a fixed block effect, by least squares: log y = block + effect·[arm] + error (the
    balanced mixed model's estimate; with one cell per arm per block it is the paired t on the per-block
    differences, df = blocks − 1). Blocks without a cell of both arms carry no information on the effect and drop
    out. None with fewer than 2 cells of an arm in the blocks holding both, or no residual df. ``p``: Student's t
    with the residual df (Hsu's min(K_a, K_b) − 1 when smaller and the counts differ); k_arm, k_base: the cells in
    those blocks."""
    fa, fb = np.isfinite(log_arm), np.isfinite(log_base)
    ya, yb = log_arm[fa], log_base[fb]
    ba = [b for b, f in zip(blocks_arm, fa, strict=True) if f]
    bb = [b for b, f in zip(blocks_base, fb, strict=True) if f]
    both = sorted(set(ba) & set(bb))
    keep_a = [i for i, b in enumerate(ba) if b in both]
    keep_b = [i for i, b in enumerate(bb) if b in both]
    if len(keep_a) < 2 or len(keep_b) < 2:
        return None
    y = np.concatenate([ya[keep_a], yb[keep_b]])
    labels = [ba[i] for i in keep_a] + [bb[i] for i in keep_b]
    index = {b: j for j, b in enumerate(both)}
    x = np.zeros((y.size, 1 + len(both)))
    x[: len(keep_a), 0] = 1.0
    for row, b in enumerate(labels):
        x[row, 1 + index[b]] = 1.0
    df = y.size - x.shape[1]
    if df < 1:
        return None
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    s2 = float(resid @ resid) / df
    cov = s2 * np.linalg.inv(x.T @ x)
    est, se = float(coef[0]), math.sqrt(max(float(cov[0, 0]), 0.0))
    ka, kb = len(keep_a), len(keep_b)
    if se <= 0:
        return Welch(est, 0.0, None, 1.0 if est == 0 else 0.0, ka, kb)
    # Unequal cell counts in the blocks kept (a failed cell): the pooled residual variance is liberal when the arm
    # with fewer cells is the noisier one (7.3 % family-wise at 4 vs 3 cells, cell sd 1 % vs 5 %, in
    # tests/stats/sim.py), so, as for Welch, Hsu's df min(K_a, K_b) - 1 (1.0 % there).
    if HSU_DF and ka != kb:
        df = min(df, min(ka, kb) - 1)
    from scipy import stats as sps
    p = float(2 * sps.t.sf(abs(est) / se, df))
    return Welch(est, se, float(df), p, ka, kb)
