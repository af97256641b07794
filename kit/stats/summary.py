"""Assembling ``summary.json`` from per-cell figures: levels, arms, failed cells and the A/B comparisons.

Pure: the reader (``kit.stats.bundle``) hands in what it read; nothing here touches files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from kit.manifest import Manifest
from kit.stats.ab import MIN_CELLS, LevelSamples, compare_levels
from kit.stats.bootstrap import CellSample
from kit.stats.cellstat import MEAN, CellRule, Slo, cell_value, good
from kit.stats.figures import arm_level_figures
from kit.stats.metrics import ATTAINMENT, EXPERTS, GOODPUT, SCHEMA_VERSION, Metric, tested
from kit.stats.numbers import clean
from kit.stats.requests import LevelRecords
from kit.stats.shapes import (
    ArmLevelEntry,
    CellEntry,
    CellLevelEntry,
    CellLevelFigures,
    FailedCell,
    GoodputCell,
    LevelEntry,
    SummaryDoc,
)

METHOD_TEXT = {
    "welch": "per level, Welch's t on the log per-cell statistics (Welch–Satterthwaite df), symmetric t interval "
             "on the log scale; ratio and absolute difference reported",
    "blocked": "per level, a paired t on the per-block differences of the log per-cell statistics (a block: one "
               "repeat of each arm, adjacent in ABBA order; blocks missing an arm drop out), Student's t on blocks "
               "- 1 df, symmetric t interval on the log scale; rates (throughput, goodput, attainment) floored at "
               "half a count; ratio and absolute difference reported",
}


@dataclass(frozen=True)
class CellInfo:
    """A planned cell and how it ended (from its ``cell.json``)."""

    id: str
    arm: str
    repeat: int
    index: int
    status: str
    reason: str | None

    @property
    def included(self) -> bool:
        return self.status == "ok"


def cell_info(planned: Mapping[str, object], meta: Mapping[str, object] | None, position: int) -> CellInfo:
    """One ``plan.json`` cell with its ``cell.json`` (None: the cell never ran)."""
    reason: object
    if meta is None:
        status, reason = "missing", "no cell.json: the cell never ran"
    else:
        status, reason = str(meta.get("status", "unknown")), meta.get("reason")
        if reason is None and status == "running":
            reason = "the cell did not finish (interrupted or still running)"
    return CellInfo(str(planned["id"]), str(planned["arm"]), int(cast(int, planned["repeat"])),
                    int(cast(int, planned.get("index", position))), status, None if reason is None else str(reason))


@dataclass
class LevelResult:
    """One level of the summary: its entry, its arms' figures and what the A/B comparison needs."""

    entry: LevelEntry
    arm_levels: list[ArmLevelEntry]
    samples: LevelSamples


def summarize_level(planned: Mapping[str, object], arms: Sequence[str], confidence: float,
                    measured: Sequence[tuple[CellInfo, LevelRecords, CellLevelFigures]]) -> LevelResult:
    """A level from the figures of every cell that has records there (excluded cells are left out here)."""
    level = int(cast(int, planned["concurrency"]))
    repeats = {c.id: c.repeat for c, _, _ in measured}
    per_arm: dict[str, list[tuple[str, LevelRecords, CellLevelFigures]]] = {a: [] for a in arms}
    for c, lr, figs in measured:
        if c.included and c.arm in per_arm:
            per_arm[c.arm].append((c.id, lr, figs))
    arm_figs = {a: arm_level_figures(v, confidence) for a, v in per_arm.items() if v}
    arm_levels: list[ArmLevelEntry] = [{"arm": a, "level": level, **f} for a, f in arm_figs.items()]
    bound_cells = sorted(cid for v in per_arm.values() for cid, _, f in v if f["client_bound"])
    entry: LevelEntry = {"concurrency": level, "requests": cast(int | None, planned.get("requests")),
                         "warmup": cast(int | None, planned.get("warmup")),
                         "client_bound": bool(bound_cells), "client_bound_cells": bound_cells}
    samples = LevelSamples(
        level=level,
        arms={a: [CellSample(cid, lr.matrix, f["throughput_tok_s"] or 0.0, repeat=repeats.get(cid),
                             censored=lr.censored, requests=lr.requests, wall_s=lr.wall_s, gaps=lr.gaps)
                  for cid, lr, f in v if lr.ok]
              for a, v in per_arm.items()},
        client_bound={a: f["client_bound"] for a, f in arm_figs.items()},
        experts={a: f["server"]["unique_experts_per_step"] if f["server"] else None for a, f in arm_figs.items()},
        failures={a: (sum(lr.errors for _, lr, _ in v), sum(lr.requests for _, lr, _ in v))
                  for a, v in per_arm.items()},
        lengths={a: (sum(f["short_responses"] for _, _, f in v), sum(lr.ok for _, lr, _ in v))
                 for a, v in per_arm.items()},
        ttft_client_bound={a: any(f["ttft_client_bound"] for _, _, f in v) for a, v in per_arm.items()},
        usage={a: (sum(f["usage_flagged"] for _, _, f in v), sum(lr.ok for _, lr, _ in v))
               for a, v in per_arm.items()},
    )
    return LevelResult(entry, arm_levels, samples)


def cell_entry(c: CellInfo, levels: dict[str, CellLevelFigures],
               values: Mapping[str, dict[str, float | None]] | None = None) -> CellEntry:
    """A cell's entry; ``values``: its cell statistics by level (``cell_statistics``), added to those levels."""
    entries: dict[str, CellLevelEntry] = {}
    for lv, f in levels.items():
        entries[lv] = cast(CellLevelEntry, {**f, "cell_values": values[lv]} if values and lv in values else f)
    return {"id": c.id, "arm": c.arm, "repeat": c.repeat, "index": c.index, "status": c.status,
            "reason": c.reason, "included": c.included, "levels": entries}


def cell_statistics(levels: Sequence[LevelResult], rule: CellRule, metrics: Sequence[Metric],
                    ) -> dict[str, dict[str, dict[str, float | None]]]:
    """cell id -> level -> tested metric -> the pre-registered cell statistic the A/B test compared (schema 5):
    what `kit reproduce` and `kit compare` judge both runs' effects on (every included cell with an ok request)."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for lv in levels:
        for cells in lv.samples.arms.values():
            for c in cells:
                out.setdefault(c.cell_id, {})[str(lv.samples.level)] = {m.key: cell_value(c, m, rule)
                                                                         for m in metrics}
    return out


BLOCKED_MIN_REPEATS = 6  # the paired t's df is repeats - 1: below 5, an identical re-run reads "imprecise"
ALTERNATING = ("abba", "counterbalanced")  # orders whose one-repeat pairs alternate (A B, B A): drift cancels


def analysis_rule(m: Manifest, *, legacy: bool = False) -> tuple[CellRule, str]:
    """The manifest's cell rule (statistic, trim, SLO) and comparison method; ``legacy``: as summary schemas before
    5 computed every bundle (the cell mean, Welch's t; their manifests could set neither). Without an explicit
    ``analysis.method`` the default is blocked for an ABBA (or counterbalanced) order of at least BLOCKED_MIN_REPEATS
    repeats per arm and Welch otherwise."""
    a = m.analysis
    if legacy:
        return MEAN, "welch"
    slo = None if a.slo is None else Slo(a.slo.ttft_ms, a.slo.tpot_ms, a.slo.e2e_ms)
    method = a.method
    if "method" not in a.model_fields_set and (m.design.order not in ALTERNATING
                                               or m.design.repeats < BLOCKED_MIN_REPEATS):
        method = "welch"  # the paired t only where pairs alternate, and with enough pairs (docs/statistics.md)
    return CellRule(a.statistic, a.trim, slo), method


def goodput_cells(levels: Sequence[LevelResult], rule: CellRule) -> list[GoodputCell]:
    """Every included cell's goodput and SLO attainment at every level (empty without an SLO)."""
    if rule.slo is None:
        return []
    out: list[GoodputCell] = []
    for lv in levels:
        for arm, cells in lv.samples.arms.items():
            for c in cells:
                out.append({"cell": c.cell_id, "arm": arm, "level": lv.samples.level,
                            "requests": c.matrix.shape[0] if c.requests is None else c.requests,
                            "good": good(c, rule.slo), "wall_s": c.wall_s,
                            "goodput_req_s": cell_value(c, GOODPUT, rule),
                            "slo_attainment": cell_value(c, ATTAINMENT, rule)})
    return out


def summary_doc(m: Manifest, cells: Sequence[tuple[CellInfo, dict[str, CellLevelFigures]]],
                levels: Sequence[LevelResult], *, legacy: bool = False) -> SummaryDoc:
    """The whole summary (JSON-ready: floats rounded to significant digits, NaN/inf as None); ``legacy``: with
    the analysis summary schemas before 5 made (``analysis_rule``), for `kit verify` of an earlier bundle."""
    arms = [a.name for a in m.arms]
    conf = m.analysis.confidence
    primary = m.analysis.primary
    rule, method = analysis_rule(m, legacy=legacy)
    metrics = tested(rule.slo is not None)
    comparisons, m_size, m_secondary = compare_levels(
        [lv.samples for lv in levels], arms, m.baseline_arm, primary=primary,
        correction=m.analysis.correction, confidence=conf, rule=rule, method=method)
    alpha = 1 - conf
    values = cell_statistics(levels, rule, metrics)
    failed: list[FailedCell] = [{"id": c.id, "arm": c.arm, "repeat": c.repeat, "status": c.status,
                                 "reason": c.reason} for c, _ in cells if not c.included]
    summary: SummaryDoc = {
        "schema_version": SCHEMA_VERSION,
        "experiment": m.name,
        "arms": arms,
        "baseline": m.baseline_arm,
        "levels": [lv.entry for lv in levels],
        "analysis": {
            "confidence": conf,
            "primary": primary,
            "secondary": [t.key for t in metrics if t.key != primary],
            "family_size": m_size,
            "secondary_family_size": m_secondary,
            "adjusted_confidence": 1 - alpha / max(m_size, 1),
            "correction": m.analysis.correction,
            "resamples": m.analysis.resamples,
            "seed": m.load.seed,
            "method": METHOD_TEXT[method],
            "min_cells": MIN_CELLS,
            "error_test": "fisher_exact on pooled failed/ok counts; p < 1 - confidence withholds the verdict",
            "length_test": "fisher_exact on pooled short/ok counts (ok requests with fewer output tokens than "
                           "asked); p < 1 - confidence withholds the verdict",
            "usage_test": "any ok request in either arm whose server usage count is implausible (not an integer "
                          "in 0..2^31), below the client's count of content events or above the output tokens "
                          "asked withholds the verdict; such a request's timing uses the client's count",
            "censoring": "timed-out requests enter the TTFT/TPOT/E2E figures censored at the timeout (E2E at the "
                         "timeout, TTFT there too when no chunk arrived); other errors are counted only",
            "tested_metrics": [t.key for t in metrics],
            "descriptive_metrics": [EXPERTS.key],
            "output_tokens_requested": m.load.output_tokens,
            "docs": "docs/statistics.md",
            "comparison_method": method,
            "cell_statistic": rule.statistic,
            "cell_statistic_trim": rule.trim if rule.statistic == "trimmed" else None,
            "slo": None if rule.slo is None else rule.slo.as_dict(),
        },
        "cells": [cell_entry(c, figs, values.get(c.id)) for c, figs in cells],
        "failed_cells": failed,
        "arm_levels": [a for lv in levels for a in lv.arm_levels],
        "comparisons": comparisons,
        "goodput": goodput_cells(levels, rule),
    }
    return cast(SummaryDoc, clean(summary))
