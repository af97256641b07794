"""A/B comparison of each non-baseline arm with the baseline, per level: the primary metric's confirmatory
family and the secondary metrics' family, each corrected on its own. The method: docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from kit.stats.bootstrap import CellSample
from kit.stats.cellstat import MEAN, CellRule, log_values, pooled_value
from kit.stats.metrics import EXPERTS, FArray, Metric, tested
from kit.stats.model import Welch, blocked, fisher_p, holm_levels, welch
from kit.stats.shapes import Comparison, ErrorCounts, LengthCounts, UsageCounts
from kit.stats.verdict import comparison_status, descriptive_text, verdict_text

MIN_CELLS = 2  # fewer ok cells in an arm at a level: no verdict
BLOCK_REPEATS = 1  # the blocked analysis's block: this many consecutive repeats (1: the adjacent A B or B A of one
# repeat; 2, the whole A B B A, leaves the paired t K/2 - 1 df: tests/stats/sim_blocked.py, docs/statistics.md)
METHOD_NAMES = {"welch": "welch_log_cells", "blocked": "blocked_log_cells"}


@dataclass(frozen=True)
class LevelSamples:
    level: int
    arms: dict[str, list[CellSample]]
    client_bound: dict[str, bool]  # per arm: any included cell client-bound
    experts: dict[str, float | None]  # per arm: mean unique experts/step
    failures: dict[str, tuple[int, int]] = field(default_factory=dict)  # per arm: (failed, requests), pooled
    lengths: dict[str, tuple[int, int]] = field(default_factory=dict)  # per arm: (short, ok requests), pooled
    ttft_client_bound: dict[str, bool] = field(default_factory=dict)  # per arm: the client's TTFT share too large
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)  # per arm: (usage flagged, ok requests), pooled

UNBOUNDED_LOG = 700.0  # a log ratio beyond which an interval excludes no ratio worth writing (e^700 ~ 1e304)


def bounded(lo: float, hi: float) -> bool:
    """Whether a log-ratio interval can be written as ratios: both ends finite and within e^+-700."""
    return math.isfinite(lo) and math.isfinite(hi) and max(-lo, hi) <= UNBOUNDED_LOG


def metric_by_key(key: str) -> Metric:
    return next(m for m in tested(True) if m.key == key)


def block_of(cell: CellSample) -> int:
    """The cell's block in the blocked analysis (its repeat, grouped by BLOCK_REPEATS); -1 when unknown."""
    return block_of_repeat(cell.repeat)


def block_of_repeat(repeat: int | None) -> int:
    """The block of a cell of this repeat (1-based), grouped by BLOCK_REPEATS; -1 when unknown."""
    return -1 if repeat is None else (repeat - 1) // BLOCK_REPEATS


def family(levels: Sequence[LevelSamples], arms: Sequence[str], baseline: str,
           metrics: Sequence[Metric]) -> list[tuple[str, int, Metric]]:
    """Every (arm, level, metric) of a family, fixed by the design (not by which cells succeeded)."""
    return [(arm, ls.level, m) for arm in arms if arm != baseline for ls in levels for m in metrics]


def _logs(cells: Sequence[CellSample], metric: Metric, rule: CellRule = MEAN) -> FArray:
    if not cells:
        return np.zeros(0)
    return log_values(cells, metric, rule)


def run_test(a: Sequence[CellSample], b: Sequence[CellSample], metric: Metric, rule: CellRule = MEAN,
             method: str = "welch") -> Welch | None:
    """The pre-registered test of arm cells ``a`` against baseline cells ``b`` on the log cell statistics."""
    if method == "blocked":
        return blocked(_logs(a, metric, rule), [block_of(c) for c in a], _logs(b, metric, rule),
                       [block_of(c) for c in b])
    return welch(_logs(a, metric, rule), _logs(b, metric, rule))


def _rates(counts: dict[str, tuple[int, int]], arm: str, baseline: str) -> tuple[int, int, int, int, float | None]:
    """(events, of n) of the arm and of the baseline, pooled over cells, and Fisher's exact p of their rates."""
    ea, na = counts.get(arm, (0, 0))
    eb, nb = counts.get(baseline, (0, 0))
    return ea, na, eb, nb, fisher_p(ea, na, eb, nb)


def _errors(ls: LevelSamples, arm: str, baseline: str) -> ErrorCounts:
    fa, na, fb, nb, p = _rates(ls.failures, arm, baseline)
    return {"arm_failed": fa, "arm_requests": na, "baseline_failed": fb, "baseline_requests": nb,
            "test": "fisher_exact_pooled", "p": p}


def _lengths(ls: LevelSamples, arm: str, baseline: str) -> LengthCounts:
    """Short responses (fewer output tokens than asked) of both arms, and Fisher's test of their rates."""
    sa, na, sb, nb, p = _rates(ls.lengths, arm, baseline)
    return {"arm_short": sa, "arm_ok": na, "baseline_short": sb, "baseline_ok": nb,
            "test": "fisher_exact_pooled", "p": p}


def _usage(ls: LevelSamples, arm: str, baseline: str) -> UsageCounts:
    """Ok requests of both arms whose server usage count is not believed; any one withholds the verdict."""
    fa, na = ls.usage.get(arm, (0, 0))
    fb, nb = ls.usage.get(baseline, (0, 0))
    return {"arm_flagged": fa, "arm_ok": na, "baseline_flagged": fb, "baseline_ok": nb, "test": "any_flagged"}


@dataclass(frozen=True)
class _Test:
    arm: str
    baseline: str
    ls: LevelSamples
    metric: Metric
    role: str
    result: Welch | None
    withheld: str | None  # status when the verdict is withheld
    errors: ErrorCounts
    lengths: LengthCounts
    usage: UsageCounts
    rule: CellRule = MEAN
    method: str = "welch"

    @property
    def p(self) -> float:
        return 1.0 if self.result is None or self.withheld else self.result.p


def _test(arm: str, baseline: str, ls: LevelSamples, metric: Metric, role: str, alpha: float,
          rule: CellRule = MEAN, method: str = "welch") -> _Test:
    a, b = ls.arms.get(arm, []), ls.arms.get(baseline, [])
    result = run_test(a, b, metric, rule, method)
    errors = _errors(ls, arm, baseline)
    lengths = _lengths(ls, arm, baseline)
    usage = _usage(ls, arm, baseline)
    withheld = None
    if result is None:
        withheld = "too_few_cells"
    elif usage["arm_flagged"] or usage["baseline_flagged"]:  # a server's token counts cannot be true
        withheld = "usage_flagged"
    elif errors["p"] is not None and errors["p"] < alpha:
        withheld = "error_rate_differs"
    elif lengths["p"] is not None and lengths["p"] < alpha:  # the arms did different work per request
        withheld = "output_lengths_differ"
    elif ls.client_bound.get(arm, False) or ls.client_bound.get(baseline, False):
        withheld = "client_bound"
    elif metric.key.startswith("ttft") and (ls.ttft_client_bound.get(arm, False)
                                            or ls.ttft_client_bound.get(baseline, False)):
        withheld = "ttft_client_bound"
    return _Test(arm, baseline, ls, metric, role, result, withheld, errors, lengths, usage, rule, method)


def _comparison(t: _Test, rejected: bool, tail: float) -> Comparison:
    a, b = t.ls.arms.get(t.arm, []), t.ls.arms.get(t.baseline, [])
    va, vb = pooled_value(a, t.metric, t.rule), pooled_value(b, t.metric, t.rule)
    r = t.result
    if r is None:
        ratio, ci, diff, diff_ci = (va / vb if vb else math.nan), None, va - vb, None
    else:
        base = math.exp(float(np.nanmean(_logs(b, t.metric, t.rule))))  # the baseline's geometric-mean cell value
        lo, hi = r.interval(tail)
        ratio = math.exp(r.estimate)
        # few df at a high confidence (two cells an arm at 99.9 %) can put a bound beyond e^700: no ratio is
        # excluded on that side, so the interval is not shown (math.exp raised OverflowError: no summary at all)
        ci = [math.exp(lo), math.exp(hi)] if bounded(lo, hi) else None
        diff, diff_ci = base * (ratio - 1), None if ci is None else [base * (ci[0] - 1), base * (ci[1] - 1)]
    significant = rejected and t.withheld is None
    client_bound = t.ls.client_bound.get(t.arm, False) or t.ls.client_bound.get(t.baseline, False)
    status = comparison_status(t.withheld, significant)
    label = t.rule.label(t.metric)
    shown = t.metric if label == t.metric.label else replace(t.metric, label=label)
    return {
        "arm": t.arm, "baseline": t.baseline, "level": t.ls.level, "metric": t.metric.key, "label": label,
        "unit": t.metric.unit, "higher_is_better": t.metric.higher_is_better, "tested": True, "role": t.role,
        "arm_value": va, "baseline_value": vb,
        "ratio": ratio, "ratio_ci": ci,
        "diff": diff, "diff_ci": diff_ci,
        "change_pct": 100 * (ratio - 1), "change_pct_ci": None if ci is None else [100 * (c - 1) for c in ci],
        # the cells the test used (finite values; blocked: in blocks holding both arms), not merely those included
        "cells": {"arm": len(a), "baseline": len(b)} if r is None else {"arm": r.k_arm, "baseline": r.k_base},
        "method": METHOD_NAMES[t.method],
        "df": None if r is None else r.df, "p_value": None if r is None else r.p,
        "interval_confidence": None if r is None else 1 - tail,
        "significant": significant, "client_bound": client_bound, "status": status, "errors": t.errors,
        "lengths": t.lengths, "usage": t.usage,
        "verdict": verdict_text(t.arm, shown, status, ratio, ci, diff, diff_ci, t.errors, t.lengths, t.usage),
    }


def experts_comparison(arm: str, baseline: str, ls: LevelSamples) -> Comparison | None:
    va, vb = ls.experts.get(arm), ls.experts.get(baseline)
    if va is None or vb is None or vb == 0:
        return None
    ratio = va / vb
    return {
        "arm": arm, "baseline": baseline, "level": ls.level, "metric": EXPERTS.key, "label": EXPERTS.label,
        "unit": EXPERTS.unit, "higher_is_better": False, "tested": False, "role": "descriptive",
        "arm_value": va, "baseline_value": vb, "ratio": ratio, "ratio_ci": None,
        "diff": va - vb, "diff_ci": None, "change_pct": 100 * (ratio - 1), "change_pct_ci": None,
        "cells": {"arm": len(ls.arms.get(arm, [])), "baseline": len(ls.arms.get(baseline, []))},
        "method": "descriptive", "df": None, "p_value": None, "interval_confidence": None, "significant": None,
        "client_bound": ls.client_bound.get(arm, False) or ls.client_bound.get(baseline, False),
        "status": "descriptive", "errors": _errors(ls, arm, baseline), "lengths": _lengths(ls, arm, baseline),
        "usage": _usage(ls, arm, baseline), "verdict": descriptive_text(ratio),
    }


def _run_family(tests: list[_Test], alpha: float, correction: str) -> list[Comparison]:
    rejected, tails = holm_levels([t.p for t in tests], alpha, correction)
    return [_comparison(t, rej, tail) for t, rej, tail in zip(tests, rejected, tails, strict=True)]


def compare_levels(levels: Sequence[LevelSamples], arms: Sequence[str], baseline: str, *, primary: str,
                   correction: str, confidence: float, rule: CellRule = MEAN,
                   method: str = "welch") -> tuple[list[Comparison], int, int]:
    """All comparisons (primary family, then secondary, then descriptive) and the two family sizes; ``rule``: the
    cell statistic and SLO (analysis.statistic, analysis.slo), ``method``: welch or blocked (analysis.method)."""
    alpha = 1 - confidence
    by_level = {ls.level: ls for ls in levels}
    prim = metric_by_key(primary)
    fams = []
    metrics_tested = tested(rule.slo is not None)
    for role, metrics in (("primary", [prim]), ("secondary", [m for m in metrics_tested if m.key != primary])):
        tests = [_test(arm, baseline, by_level[lv], m, role, alpha, rule, method) for arm, lv, m in
                 family(levels, arms, baseline, metrics)]
        fams.append(tests)
    out = _run_family(fams[0], alpha, correction) + _run_family(fams[1], alpha, correction)
    for arm in arms:
        if arm == baseline:
            continue
        for ls in levels:
            extra = experts_comparison(arm, baseline, ls)
            if extra is not None:
                out.append(extra)
    return out, len(fams[0]), len(fams[1])
