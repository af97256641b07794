"""Quantiles of the normal and Student's t distributions (standard library only)."""

from __future__ import annotations

import math
import statistics

T_EXACT_MAX_DF = 1000  # above this, Student's t is the normal distribution for our purposes


def z_quantile(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def _t_central(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan theta) for Student's t with integer df (Abramowitz & Stegun 26.7.3-4)."""
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        term = total = math.cos(theta)
        for k in range(3, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + s * total)
    term = total = 1.0
    for k in range(2, df - 1, 2):
        term *= c2 * (k - 1) / k
        total += term
    return s * total


def t_quantile(p: float, df: int | None) -> float:
    """The p-quantile (p > 0.5) of Student's t with integer df (None or large: the normal)."""
    if df is None or df > T_EXACT_MAX_DF:
        return z_quantile(p)
    if df < 1:
        raise ValueError("df must be >= 1")
    target = 2 * p - 1  # central probability
    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_central(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan((lo + hi) / 2)
