"""A/B comparison of each non-baseline arm with the baseline, per level, with Bonferroni-adjusted intervals.

Throughput (output tok/s: the mean of the cells' figures) and the means of TTFT, TPOT, ITL and E2E (pooled
over the arm's cells) are tested; unique experts/step is descriptive. See ``kit.stats`` for the method.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kit.stats.bootstrap import (
    ArmBootstrap,
    CellSample,
    bootstrap_arm,
    calibrated_log_replicates,
    extrapolated_interval,
)
from kit.stats.metrics import EXPERTS, TESTED, FArray, Metric
from kit.stats.shapes import Comparison
from kit.stats.verdict import comparison_status, descriptive_text, verdict_text


@dataclass(frozen=True)
class LevelSamples:
    level: int
    arms: dict[str, list[CellSample]]
    client_bound: dict[str, bool]  # per arm: any included cell client-bound
    experts: dict[str, float | None]  # per arm: mean unique experts/step


def _rng(seed: int, arm: str, level: int, hierarchical: bool) -> np.random.Generator:
    words = [seed % (1 << 63), zlib.crc32(arm.encode()), level, int(hierarchical)]
    return np.random.default_rng(np.random.SeedSequence(words))


def _has_data(cells: Sequence[CellSample], metric: Metric) -> bool:
    if not cells:
        return False
    if metric.num is None or metric.den is None:
        return all(math.isfinite(c.tok_s) and c.tok_s > 0 for c in cells)
    num = sum(float(c.matrix[:, metric.num].sum()) for c in cells)
    den = sum(float(c.matrix[:, metric.den].sum()) for c in cells)
    return den > 0 and num > 0


def family(levels: Sequence[LevelSamples], arms: Sequence[str], baseline: str) -> list[tuple[str, int, Metric]]:
    """Every (arm, level, metric) tested: the Bonferroni family."""
    out = []
    for arm in arms:
        if arm == baseline:
            continue
        for ls in levels:
            a, b = ls.arms.get(arm, []), ls.arms.get(baseline, [])
            out += [(arm, ls.level, m) for m in TESTED if _has_data(a, m) and _has_data(b, m)]
    return out


@dataclass
class _Comparer:
    seed: int
    resamples: int
    confidence: float
    family_size: int
    calibrate: bool
    cache: dict[tuple[str, int, bool], tuple[ArmBootstrap, FArray]]

    @property
    def tail(self) -> float:
        return (1 - self.confidence) / max(self.family_size, 1)

    def boot(self, arm: str, ls: LevelSamples, hierarchical: bool) -> tuple[ArmBootstrap, FArray]:
        """The arm's bootstrap at this level and its (calibrated) log replicates, computed once."""
        key = (arm, ls.level, hierarchical)
        if key not in self.cache:
            rng = _rng(self.seed, arm, ls.level, hierarchical)
            boot = bootstrap_arm(ls.arms[arm], TESTED, self.resamples, rng, hierarchical=hierarchical)
            self.cache[key] = (boot, calibrated_log_replicates(boot, calibrate=self.calibrate and hierarchical))
        return self.cache[key]

    def compare(self, arm: str, baseline: str, ls: LevelSamples, metric: Metric) -> Comparison:
        ka, kb = len(ls.arms[arm]), len(ls.arms[baseline])
        hierarchical = min(ka, kb) >= 2
        (ba, logs_a), (bb, logs_b) = self.boot(arm, ls, hierarchical), self.boot(baseline, ls, hierarchical)
        j = TESTED.index(metric)
        cal = self.calibrate and hierarchical
        la, lb = logs_a[:, j], logs_b[:, j]
        va, vb = float(ba.observed[j]), float(bb.observed[j])
        df = ka + kb - 2 if cal else None
        log_lo, log_hi = extrapolated_interval(math.log(va / vb), la - lb, self.tail, df)
        diff_lo, diff_hi = extrapolated_interval(va - vb, np.exp(la) - np.exp(lb), self.tail, df)
        ratio = va / vb
        ci = [math.exp(log_lo), math.exp(log_hi)]
        client_bound = ls.client_bound.get(arm, False) or ls.client_bound.get(baseline, False)
        significant = ci[0] > 1 or ci[1] < 1
        single = [a for a, k in ((baseline, kb), (arm, ka)) if k < 2]
        return {
            "arm": arm, "baseline": baseline, "level": ls.level, "metric": metric.key, "label": metric.label,
            "unit": metric.unit, "higher_is_better": metric.higher_is_better, "tested": True,
            "arm_value": va, "baseline_value": vb,
            "ratio": ratio, "ratio_ci": ci,
            "diff": va - vb, "diff_ci": [diff_lo, diff_hi],
            "change_pct": 100 * (ratio - 1), "change_pct_ci": [100 * (ci[0] - 1), 100 * (ci[1] - 1)],
            "cells": {"arm": ka, "baseline": kb},
            "method": "hierarchical" if hierarchical else "requests_only",
            "df": df, "significant": significant, "client_bound": client_bound,
            "status": comparison_status(client_bound, significant),
            "verdict": verdict_text(arm, metric, ratio, ci, client_bound=client_bound, single_cell_arms=single),
        }


def experts_comparison(arm: str, baseline: str, ls: LevelSamples) -> Comparison | None:
    va, vb = ls.experts.get(arm), ls.experts.get(baseline)
    if va is None or vb is None or vb == 0:
        return None
    ratio = va / vb
    return {
        "arm": arm, "baseline": baseline, "level": ls.level, "metric": EXPERTS.key, "label": EXPERTS.label,
        "unit": EXPERTS.unit, "higher_is_better": False, "tested": False,
        "arm_value": va, "baseline_value": vb, "ratio": ratio, "ratio_ci": None,
        "diff": va - vb, "diff_ci": None, "change_pct": 100 * (ratio - 1), "change_pct_ci": None,
        "cells": {"arm": len(ls.arms.get(arm, [])), "baseline": len(ls.arms.get(baseline, []))},
        "method": "descriptive", "df": None, "significant": None,
        "client_bound": ls.client_bound.get(arm, False) or ls.client_bound.get(baseline, False),
        "status": "descriptive",
        "verdict": descriptive_text(ratio),
    }


def compare_levels(levels: Sequence[LevelSamples], arms: Sequence[str], baseline: str, *, seed: int,
                   resamples: int, confidence: float, calibrate: bool = True) -> tuple[list[Comparison], int]:
    """All comparisons (tested ones first in family order, then descriptive ones) and the family size."""
    fam = family(levels, arms, baseline)
    comparer = _Comparer(seed, resamples, confidence, len(fam), calibrate, {})
    by_level = {ls.level: ls for ls in levels}
    out = [comparer.compare(arm, baseline, by_level[level], metric) for arm, level, metric in fam]
    for arm in arms:
        if arm == baseline:
            continue
        for ls in levels:
            extra = experts_comparison(arm, baseline, ls)
            if extra is not None:
                out.append(extra)
    return out, len(fam)
