"""Group-sequential boundaries: alpha spending (Lan & DeMets 1983) and a sequentially rejective Holm over the
primary family at each look (Maurer & Bretz 2013). Pure functions of the looks so far; docs/statistics.md.

A comparison's information fraction at a look is its ok cells (both arms) over the most it can have (2 x
design.repeats). The cumulative two-sided alpha spent by fraction t is, O'Brien-Fleming-type (the default),
2 x [2 - 2 Phi(z_{1-a/4} / sqrt t)] (each side spends a/2, as gsDesign's sfLDOF and rpact's asOF do), or
Pocock-type a ln(1 + (e - 1) t). The z boundaries c_1..c_k are those of the
canonical joint distribution (Z_j = S_j / sqrt t_j, S a Brownian motion in t: corr(Z_i, Z_j) = sqrt(t_i / t_j)),
found by recursive numerical integration (Armitage, McPherson & Rowe 1969; Jennison & Turnbull 2000, ch. 19):
P(first |Z_j| >= c_j at look j) = spent(t_j) - spent(t_{j-1}). The last look (the maximum, or the budget's end)
spends all the alpha left. kit tests the Welch t on log cells against the boundary's nominal two-sided level
2 (1 - Phi(c_j)) (the "significance level" approach for t statistics, Jennison & Turnbull section 11.4); the
simulation in tests/stats/test_sequential_simulation.py measures the family-wise error that holds.

One-sided boundaries (``sides=1``: reject when Z_j >= c_j, never stopped on the other side) come from the same
recursion with the continuation region S < c_j sqrt(t_j) and one-sided spending (O'Brien-Fleming-type
2 - 2 Phi(z_{1-a/2} / sqrt t), Pocock-type as above); ``kit reproduce --until-decided`` tests each of TOST's two
one-sided hypotheses with them (kit.reproduce.sequential). They agree with the two-sided boundaries at 2 alpha to
about 1e-4 in z (a path that crosses the far side of a two-sided design is that rare), and are computed, not
borrowed.

Holm across the family (levels x non-baseline arms): a hypothesis starts with alpha / m; when one is rejected
(at any look), its alpha passes to the others, each now tested at alpha / (m - r) with boundaries recomputed
for that level over its own fractions, at every look so far (the graphical approach for group-sequential
trials, which controls the family-wise error strongly).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kit.stats import lazy

SPENDING = ("obrien-fleming", "pocock")
_GRID = 401  # points per look (odd: Simpson's rule); boundaries agree with 2001 points to < 1e-4
_CAP = 12.0  # |z| beyond which no density is kept (and a boundary is "never")


def _ndtr(x: Any) -> Any:
    """The standard normal CDF (scipy.special.ndtr, through kit.stats.lazy)."""
    special = lazy.special()
    return special.ndtr(x)


def _ndtri(p: float) -> float:
    special = lazy.special()
    return float(special.ndtri(p))


def spent(t: float, alpha: float, spending: str, sides: int = 2) -> float:
    """The cumulative alpha spent by information fraction t (0 < t; t >= 1 spends all of alpha): two-sided
    (``sides`` 2: each side a/2) or one-sided (``sides`` 1: O'Brien-Fleming-type 2 - 2 Phi(z_{1-a/2} / sqrt t),
    Lan & DeMets' one-sided form, what gsDesign's sfLDOF spends at one-sided a)."""
    if t >= 1:
        return alpha
    if t <= 0:
        return 0.0
    if spending == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    if spending == "obrien-fleming":
        z = float(_ndtri(1 - alpha / (2 * sides)))  # each side spends alpha/sides: 2 - 2 Phi(z / sqrt t)
        return float(sides * (2 - 2 * _ndtr(z / math.sqrt(t))))
    raise ValueError(f"unknown spending function {spending!r} (one of {', '.join(SPENDING)})")


def _simpson(n: int) -> np.ndarray:
    w = np.ones(n)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    return w / 3.0


def _exit(c: float, t: float, grid: np.ndarray | None, mass: np.ndarray | None, sd: float, sides: int) -> float:
    """P(Z >= c (one-sided) or |Z| >= c (two-sided) at fraction t and not stopped before): ``mass`` is the
    sub-density of S at the previous look times its quadrature weights (None: the first look)."""
    if grid is None or mass is None:
        return float(sides * _ndtr(-c))
    b = c * math.sqrt(t)
    if sides == 1:
        return float(np.sum(mass * _ndtr((grid - b) / sd)))
    return float(np.sum(mass * (_ndtr((-b - grid) / sd) + _ndtr((grid - b) / sd))))


def _solve(target: float, t: float, grid: np.ndarray | None, mass: np.ndarray | None, sd: float,
           sides: int) -> float:
    if target <= _exit(_CAP, t, grid, mass, sd, sides):
        return math.inf  # (almost) nothing to spend at this look: it cannot reject
    lo, hi = 0.0, _CAP
    for _ in range(60):
        mid = (lo + hi) / 2
        if _exit(mid, t, grid, mass, sd, sides) > target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclass(frozen=True)
class _State:
    """The boundaries of the looks so far, and the sub-density of S in the continuation region at the last one."""

    bounds: tuple[float, ...] = ()
    grid: np.ndarray | None = None
    mass: np.ndarray | None = None
    t: float = 0.0
    spent: float = 0.0


def _bound(s: _State, t: float, cum: float, sides: int) -> float:
    """The boundary of one more look at fraction t that brings the cumulative spending to ``cum``."""
    return _solve(max(cum - s.spent, 0.0), t, s.grid, s.mass, math.sqrt(t - s.t), sides)


def _advance(s: _State, t: float, cum: float, c: float, sides: int) -> _State:
    """The state after that look: the sub-density of S in its continuation region, |S| < c sqrt(t) (two-sided) or
    S < c sqrt(t) (one-sided, down to -12 sqrt(t))."""
    sd = math.sqrt(t - s.t)
    half = min(c, _CAP) * math.sqrt(t)
    new = np.linspace(-half if sides == 2 else -_CAP * math.sqrt(t), half, _GRID)
    w = _simpson(_GRID) * (new[1] - new[0])
    if s.grid is None or s.mass is None:
        dens = np.exp(-0.5 * new**2 / t) / math.sqrt(2 * math.pi * t)
    else:
        z = (new[:, None] - s.grid[None, :]) / sd
        dens = (np.exp(-0.5 * z**2) / (math.sqrt(2 * math.pi) * sd)) @ s.mass
    return _State((*s.bounds, c), new, dens * w, t, cum if math.isfinite(c) else s.spent)


@functools.lru_cache(maxsize=4096)
def _prefix(fractions: tuple[float, ...], alpha: float, spending: str, sides: int) -> _State:
    """The state after interim looks at ``fractions`` (each spending by the function), built on the state of its
    prefix: a run's looks share their prefixes, so each look costs one step."""
    if not fractions:
        return _State()
    s = _prefix(fractions[:-1], alpha, spending, sides)
    cum = spent(fractions[-1], alpha, spending, sides)
    return _advance(s, fractions[-1], cum, _bound(s, fractions[-1], cum, sides), sides)


@functools.lru_cache(maxsize=4096)
def _boundaries(fractions: tuple[float, ...], alpha: float, spending: str, final: bool,
                sides: int = 2) -> tuple[float, ...]:
    """Cached whole (a pure function of its arguments): Holm's steps and every look of a run, and a simulation's
    experiments, ask for the same boundaries again; the last look's own search costs 60 passes over the grid."""
    if not final:
        return _prefix(fractions, alpha, spending, sides).bounds
    s = _prefix(fractions[:-1], alpha, spending, sides)
    return (*s.bounds, _bound(s, fractions[-1], alpha, sides))  # the last look spends all the alpha left


def boundaries(fractions: Sequence[float], alpha: float, spending: str = "obrien-fleming", *,
               final: bool = False, sides: int = 2) -> list[float]:
    """z boundaries c_1..c_k at strictly increasing information fractions in (0, 1] (inf: a look that cannot
    reject); ``final``: the last look spends all the alpha left; ``sides`` 2: reject when |Z| >= c (alpha over
    both sides), 1: when Z >= c (alpha on one side; the lower side never stops the test)."""
    fr = tuple(float(t) for t in fractions)
    if not fr or any(not 0 < t <= 1 for t in fr) or any(b <= a for a, b in itertools.pairwise(fr)):
        raise ValueError(f"information fractions must increase strictly within (0, 1]: {list(fr)}")
    if spending not in SPENDING:
        raise ValueError(f"unknown spending function {spending!r} (one of {', '.join(SPENDING)})")
    if sides not in (1, 2):
        raise ValueError(f"sides must be 1 or 2, not {sides}")
    return list(_boundaries(fr, round(alpha, 15), spending, final or fr[-1] >= 1, sides))


def nominal_levels(fractions: Sequence[float], alpha: float, spending: str = "obrien-fleming", *,
                   final: bool = False, sides: int = 2) -> list[float]:
    """The boundaries as nominal p-value levels: two-sided 2 (1 - Phi(c_j)), one-sided 1 - Phi(c_j) (0: the
    look cannot reject)."""
    return [0.0 if math.isinf(c) else float(sides * _ndtr(-c))
            for c in boundaries(fractions, alpha, spending, final=final, sides=sides)]


@dataclass(frozen=True)
class Hypothesis:
    """One comparison of the primary family over the looks so far: per look its information fraction and its
    two-sided p (1.0 where the verdict is withheld or there is no test)."""

    fractions: tuple[float, ...]
    pvalues: tuple[float, ...]


@dataclass(frozen=True)
class Decision:
    rejected_at: int | None  # the 0-based look where it was rejected (None: not rejected)
    level: float  # the family level its boundaries were computed at (alpha / (m - r) where Holm stopped)
    nominal: float  # the nominal two-sided p level at the last look, at that family level


def _distinct(h: Hypothesis) -> tuple[list[int], list[float]]:
    """The looks where this comparison gained information (a look with no new cell repeats the last test)."""
    idx: list[int] = []
    fr: list[float] = []
    for j, t in enumerate(h.fractions):
        if t > 0 and (not fr or t > fr[-1]):
            idx.append(j)
            fr.append(min(t, 1.0))
    return idx, fr


def first_crossing(h: Hypothesis, level: float, spending: str, final: bool, sides: int = 2,
                   ) -> tuple[int | None, float]:
    """The first look (0-based) whose p is at or below its boundary's nominal level (None: none yet), and the
    nominal level at the last look that gained information; ``sides`` 1: one-sided p-values and boundaries."""
    idx, fr = _distinct(h)
    if not fr:
        return None, 0.0
    last_final = final and idx[-1] == len(h.fractions) - 1
    noms = nominal_levels(fr, level, spending, final=last_final, sides=sides)
    for j, nom in zip(idx, noms, strict=True):
        if h.pvalues[j] <= nom:
            return j, noms[-1]
    return None, noms[-1]


def holm_sequential(hyps: Sequence[Hypothesis], alpha: float, spending: str = "obrien-fleming", *,
                    final: bool = False) -> list[Decision]:
    """The sequentially rejective Holm at the looks so far (``final``: the last look is the last there will be)."""
    m = len(hyps)
    rejected: dict[int, int] = {}
    while True:
        level = alpha / max(m - len(rejected), 1)
        new = {i: j for i, h in enumerate(hyps) if i not in rejected
               for j in [first_crossing(h, level, spending, final)[0]] if j is not None}
        if not new:
            break
        rejected.update(new)
    level = alpha / max(m - len(rejected), 1)
    out = []
    for i, h in enumerate(hyps):
        nominal = first_crossing(h, level, spending, final)[1]
        out.append(Decision(rejected.get(i), level, nominal))
    return out
