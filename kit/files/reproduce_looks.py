"""``reproduce-looks/<k>.json``: one interim look of ``kit reproduce --until-decided`` at the reproduce verdict,
written after block k of the new run and before the checkpoint of the cell that completed it; ``kit verify``
recomputes each from ``source/summary.json`` and the records of the cells it names (``kit.reproduce.looks``). The
method: docs/reproduce.md, "Stopping once the verdict is decided"."""

from __future__ import annotations

from typing import ClassVar, Literal

from kit.files.base import BundleFile, Loose
from kit.files.reproduce import CellCounts, Verdict

REPRODUCE_LOOKS_DIR = "reproduce-looks"
Decision = Literal["reproduced", "inconsistent", "continue", "withheld", "imprecise"]


def reproduce_look_rel(k: int) -> str:
    return f"{REPRODUCE_LOOKS_DIR}/{k:03d}.json"


class ReproLookComparison(Loose):
    """One A/B effect (arm vs baseline at one level) at the look: D_k = (new effect on the cells so far) -
    (original effect), log scale, and its three group-sequential tests."""

    arm: str
    baseline: str
    level: int
    status: str  # ok, or the guardrail that withholds it at this look (client_bound, too_few_cells, ab_withheld, ...)
    cells: CellCounts  # the fewer of the two arms' ok cells, per run
    claimed: bool  # the original found the effect: the margin is relative to it and its direction must hold
    delta: float  # the margin on the log scale
    log_estimate: float | None  # D_k
    log_se: float | None  # sqrt(var_o + var_n(k))
    df: float | None  # Satterthwaite's, on the two runs' SEs
    df_new: float | None  # the new run's own (fewer than 2: the look tests nothing)
    df_original: float | None
    df_test: float | None  # the p-values' df: min(df_original, df_new) at an interim look, df at the last
    se_original: float | None
    se_new: float | None
    se_new_max: float | None  # the new effect's SE at the planned cells, from its variance so far
    fraction: float  # the new run's cells so far over the planned ones (1 at the last look; 0: no test)
    tested: bool  # tested at this look (False: withheld, too few cells, or no new information)
    p_zero: float | None  # two-sided p of D = 0
    p_lower: float | None  # one-sided p of H0: D <= -delta
    p_upper: float | None  # one-sided p of H0: D >= delta
    family_alpha: float  # Holm's level for the D = 0 test (alpha / (m - r))
    nominal_zero: float  # the D = 0 boundary at this look as a two-sided nominal p level (0: cannot reject)
    nominal_tost: float  # each one-sided TOST boundary at this look as a nominal p level (at alpha)
    zero_rejected_at_look: int | None
    lower_rejected_at_look: int | None
    upper_rejected_at_look: int | None
    direction_held: bool | None  # an effect the original found: the new one points the same way (None: none found)
    repeated_ci: list[float] | None  # new/original ratio: exp(D_k +- t(1 - nominal_tost, df) se) (None: unbounded)
    reachable: bool | None  # the maximum could show equivalence if nothing changed (None: decided or last look)
    decision: Decision
    decided_at_look: int | None


class ReproduceLookFile(BundleFile):
    file_pattern: ClassVar[str] = f"{REPRODUCE_LOOKS_DIR}/*.json"

    look: int
    of: int  # the most looks (design.repeats / 2)
    cells: list[str]  # the ok cells of the new run this look used
    spending: str
    alpha: float
    final: bool  # the last look the plan allows: it spends all the alpha left
    comparisons: list[ReproLookComparison]
    stop: Literal["decided", "max_repeats"] | None  # None: the run goes on
    verdict: Verdict | None  # the headline once stopped
    why: str  # why it stopped (or what it waits for)
    notes: list[str]
