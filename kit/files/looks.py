"""``looks/<k>.json``: one interim look of a sequential design (``design.sequential``), written once after its
block and covered by the next checkpoint; ``kit verify`` recomputes each from the records of the cells it names
(``kit.stats.looks``)."""

from __future__ import annotations

from typing import ClassVar

from kit.files.base import BundleFile, Loose


class LookCells(Loose):
    arm: int
    baseline: int


class LookComparison(Loose):
    """One primary comparison at the look."""

    arm: str
    level: int
    cells: LookCells
    fraction: float  # information fraction: the comparison's ok cells over 2 x design.repeats
    p_value: float | None  # Welch's two-sided p (unadjusted)
    p_test: float  # the p the boundary is applied to (1 where the verdict is withheld)
    status: str  # kit's comparison status at this look (significant/not_significant as a fixed test, or withheld)
    change_pct: float | None
    family_alpha: float  # alpha / (m - r): the level its boundaries were computed at
    nominal_p: float  # the boundary at this look as a nominal two-sided p level (0: this look cannot reject)
    rejected_at_look: int | None
    futility_ci_pct: list[float] | None
    # the repeated confidence interval of the ratio arm/baseline at this look (Jennison & Turnbull): the estimate
    # +- t(1 - nominal_p/2, df) se; together over the looks it covers with repeated_confidence (None: unbounded)
    repeated_ci: list[float] | None = None
    repeated_confidence: float | None = None  # 1 - family_alpha: the simultaneous level over the looks
    decision: str  # efficacy | futility | withheld | continue


class LookFile(BundleFile):
    file_pattern: ClassVar[str] = "looks/*.json"

    look: int
    of: int  # the most looks the design allows (design.repeats / 2)
    cells: list[str]  # the ok cells this look used
    elapsed_s: float  # the run's cells' wall time so far (the time budget's measure)
    spending: str
    alpha: float
    correction: str
    most_cells_per_comparison: int
    final: str | None  # max_repeats | time_budget | None
    comparisons: list[LookComparison]
    decided: bool
    stop: str | None  # decided | max_repeats | time_budget | None (the run goes on)
