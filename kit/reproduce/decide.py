"""The reproduction rule on one comparison, pure: a contrast of the two runs (new - original, log scale) in, a
verdict out. The method: docs/reproduce.md.

- **reproduced**: TOST within the pre-registered margin passes (the (1 - 2 alpha) interval of D inside (-delta,
  delta)), and an effect the original found kept its direction. This comes first: two precise runs can tell apart
  effects that differ by less than the margin (a few per cent, from the machines' state), and the margin is the
  user's own statement that such a difference does not matter; the line then says the difference is detectable;
- **inconsistent**: otherwise, when the test of D = 0 rejects after Holm's correction over the family (the new run
  lies outside the original's prediction interval; Patil, Peng & Leek 2016);
- **imprecise** otherwise, with the repeats that would show equivalence if nothing changed (at D = 0, from the
  pooled between-cell SD, never from the observed difference).

The margin of an A/B effect is relative to the effect the original found (``effect_margin`` times its log ratio);
where the original found none, and for an arm's shift, it is absolute (``absolute_margin``, a ratio).
``judge_effects`` is the whole rule on a list of effects without guardrails: what `kit reproduce` does with two
summaries' cells (kit.reproduce.verdict), and what the simulation in tests/stats/ feeds its own cells to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kit.files.reproduce import Verdict
from kit.manifest.analysis import Analysis
from kit.reproduce.equivalence import (
    Contrast,
    contrast,
    difference,
    holm_adjusted,
    interval,
    log_margin,
    p_equivalent,
    p_zero,
    repeats_at_zero,
)
from kit.stats.metrics import FArray

POWER = 0.8  # of the prospective repeats figure


@dataclass(frozen=True)
class Rule:
    """What the manifest pre-registered: analysis.reproduce.margin, analysis.reproduce_margin, the confidence."""

    effect_margin: float  # fraction of the original's effect (log scale)
    absolute_margin: float  # a ratio within [1/(1 + m), 1 + m]
    alpha: float  # 1 - analysis.confidence
    even: bool = False  # ABBA: the repeats figure rounded up to an even number

    @classmethod
    def of(cls, analysis: Analysis, *, even: bool = False, effect_margin: float | None = None,
           absolute_margin: float | None = None) -> Rule:
        """The manifest's rule (``effect_margin``/``absolute_margin``: `kit compare`'s overrides)."""
        return cls(effect_margin if effect_margin is not None else analysis.reproduce.margin,
                   absolute_margin if absolute_margin is not None else analysis.reproduce_margin,
                   1 - analysis.confidence, even)

    def delta(self, claimed: float | None) -> float:
        """The margin on the log scale: effect_margin * |claimed| for an effect the original found (``claimed``: the
        log of its ratio), else the absolute margin."""
        return self.effect_margin * abs(claimed) if claimed is not None else log_margin(self.absolute_margin)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    estimate: float  # D, log scale
    se: float
    df: float | None
    low: float  # the (1 - 2 alpha) interval of D: its inclusion in (-delta, delta) is TOST
    high: float
    delta: float
    p_zero: float  # raw two-sided p of D = 0
    p_zero_adjusted: float  # Holm-adjusted over the family
    p_equivalent: float
    direction_held: bool | None  # an effect the original found: the new run's has the same sign (None: none found)
    repeats_needed: int | None  # imprecise: cells per arm in each run for 80 % power at D = 0 (None: > 1000)


def decide(c: Contrast, claimed: float | None, p_adjusted: float, rule: Rule) -> Decision:
    """One comparison. ``claimed``: the original's log effect when it found one (the margin is relative to it, and
    the new effect, claimed + D, must keep its sign), else None; ``p_adjusted``: this test's Holm-adjusted p."""
    delta = rule.delta(claimed)
    low, high = interval(c, 1 - 2 * rule.alpha)
    p_eq = p_equivalent(c, delta)
    held = None if claimed is None else (claimed + c.estimate) * claimed > 0
    verdict: Verdict
    if p_eq < rule.alpha and held is not False:  # within the pre-registered margin, even where D = 0 is rejected
        verdict = "reproduced"
    elif p_adjusted < rule.alpha:
        verdict = "inconsistent"
    else:
        verdict = "imprecise"
    repeats = repeats_at_zero(c, delta, rule.alpha, power=POWER, even=rule.even) if verdict == "imprecise" else None
    return Decision(verdict, c.estimate, c.se, c.df, low, high, delta, p_zero(c), p_adjusted, p_eq, held, repeats)


Blocks = tuple[Sequence[int], Sequence[int]]  # each cell's ABBA block: (arm's cells, baseline's cells)


@dataclass(frozen=True)
class EffectCells:
    """One A/B effect (arm against baseline at one level) in both runs: log cell statistics, whether the original's
    own A/B test found it (its primary comparison significant), and for the blocked analysis (the original's
    analysis.method) each cell's block in its run (None: Welch on the cells)."""

    original_arm: FArray
    original_base: FArray
    new_arm: FArray
    new_base: FArray
    claimed: bool
    original_blocks: Blocks | None = None
    new_blocks: Blocks | None = None


def effect_contrasts(e: EffectCells) -> tuple[Contrast, Contrast, Contrast] | None:
    """(original effect, new effect, D = new - original), each run's effect by the pre-registered method; None with
    too few cells in any group."""
    co = contrast(e.original_arm, e.original_base, e.original_blocks)
    cn = contrast(e.new_arm, e.new_base, e.new_blocks)
    if co is None or cn is None:
        return None
    return co, cn, difference(cn, co)


def judge_effects(effects: Sequence[EffectCells], rule: Rule) -> list[Decision | None]:
    """Every effect decided, the D = 0 tests Holm-corrected as one family (None: too few cells)."""
    parts = [effect_contrasts(e) for e in effects]
    ps = [p_zero(p[2]) for p in parts if p is not None]
    adjusted = iter(holm_adjusted(ps))
    out: list[Decision | None] = []
    for e, p in zip(effects, parts, strict=True):
        out.append(None if p is None else decide(p[2], p[0].estimate if e.claimed else None, next(adjusted), rule))
    return out
