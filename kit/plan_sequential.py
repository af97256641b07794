"""`kit plan` of a sequential manifest (``design.sequential``): the most cells and time the design may take, each
level's power at the planned effect under the spending boundaries (beside the fixed design's of the same maximum),
and the expected looks, cells and time to a decision under that effect and under no effect. The maths:
``kit.stats.seqplan``; docs/statistics.md, "Planning a sequential design"."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from kit.files import JsonObject
from kit.stats import power, seqplan

if TYPE_CHECKING:
    from kit.manifest import Manifest
    from kit.plan import LevelPower


@dataclass(frozen=True)
class SequentialPlan:
    spending: str
    most_looks: int  # design.repeats / 2
    looks: int  # the last look the time budget allows (most_looks without one)
    cells_per_look: int  # every arm twice
    block_minutes: float  # the estimate's time per block
    max_minutes: float | None  # design.sequential.max_minutes
    effect_source: str  # "--target-effect" or "the fixed design's MDE"
    effects: tuple[float, ...]  # per level: the log effect planned at
    power: tuple[float, ...]  # per level: the sequential design's power at it
    fixed_power: tuple[float, ...]  # per level: the fixed design of design.repeats at it
    looks_effect: float
    looks_null: float
    decided_null: float  # the share of no-effect runs decided before the last look (futility, or a false alarm)
    futility: bool
    runs: int = seqplan.RUNS

    def as_dict(self) -> JsonObject:
        return {**asdict(self), "effects": [e if math.isfinite(e) else None for e in self.effects],
                "expected_cells_effect": self.looks_effect * self.cells_per_look,
                "expected_cells_null": self.looks_null * self.cells_per_look,
                "expected_minutes_effect": self.looks_effect * self.block_minutes,
                "expected_minutes_null": self.looks_null * self.block_minutes}


def sequential_plan(m: Manifest, levels: Sequence[LevelPower], tail: float, method: str,
                    target_effect: float | None, run_minutes: float) -> SequentialPlan | None:
    """The sequential design's plan at the levels' planned SDs (None: a fixed design)."""
    seq = m.design.sequential
    if seq is None:
        return None
    k = m.design.repeats
    most = k // 2
    block = run_minutes / most
    looks = seqplan.budget_looks(most, block, seq.max_minutes)
    if target_effect is not None:
        effects = tuple(math.log1p(target_effect) for _ in levels)
        source = "--target-effect"
    else:
        effects = tuple(lv.mde if lv.mde is not None else math.inf for lv in levels)
        source = "the fixed design's MDE"
    sds = [lv.log_sd for lv in levels]
    arms = len(m.arms) - 1
    fut = None if seq.futility is None else (seq.futility.margin_pct / 100, seq.futility.confidence)
    finite = tuple(e if math.isfinite(e) else 20.0 for e in effects)
    hit = seqplan.simulate(sds, finite, arms, looks, most, tail, seq.spending, method, fut)
    null = seqplan.simulate(sds, [0.0] * len(sds), arms, looks, most, tail, seq.spending, method, fut)
    fixed = tuple(power.power(e, lv.log_sd, k, k, tail, method) for e, lv in zip(finite, levels, strict=True))
    return SequentialPlan(seq.spending, most, looks, 2 * len(m.arms), block, seq.max_minutes, source, effects,
                          hit.power, fixed, hit.looks, null.looks, null.decided, fut is not None)


def sequential_lines(sp: SequentialPlan | None, concurrencies: Sequence[int]) -> list[str]:
    if sp is None:
        return []
    budget = "" if sp.max_minutes is None else (
        f"; the time budget ({sp.max_minutes:g} min) allows {sp.looks} of them, the last spending all the alpha left"
        if sp.looks < sp.most_looks else f"; the time budget ({sp.max_minutes:g} min) allows all of them")
    out = [f"  sequential design ({sp.spending} alpha spending, a look after each block of every arm twice; "
           "docs/statistics.md, \"Planning a sequential design\"):",
           f"    at most {sp.most_looks} looks, {sp.most_looks * sp.cells_per_look} cells, about "
           f"{sp.most_looks * sp.block_minutes:.0f} min{budget}"]
    for c, e, p, f in zip(concurrencies, sp.effects, sp.power, sp.fixed_power, strict=True):
        at = "no detectable effect" if not math.isfinite(e) else (
            f"+{power.percent_up(e):.1f} % / −{power.percent_down(e):.1f} %")
        out.append(f"    c={c:<5} power {100 * p:.0f} % at {at} ({sp.effect_source}; the fixed design of the same "
                   f"maximum: {100 * f:.0f} %)")

    def expect(looks: float) -> str:
        return (f"{looks:.1f} looks, {looks * sp.cells_per_look:.1f} cells, about {looks * sp.block_minutes:.0f} "
                "min")

    null = expect(sp.looks_null) + ("" if not sp.futility else
                                    f" ({100 * sp.decided_null:.0f} % decided before the last look)")
    out.append(f"    expected to the stop: under that effect {expect(sp.looks_effect)}; under no effect {null}")
    out.append(f"    by simulation of kit's test ({sp.runs} runs, seeded: a power within ±"
               f"{100 * 2 * math.sqrt(0.25 / sp.runs):.1f} points), normal log cell statistics at the SDs above, "
               "every comparison at alpha/m (Holm's first step: conservative for Holm), independent given the "
               "baseline")
    return out
