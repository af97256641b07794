"""The pre-registered cell statistic (analysis.statistic) and the SLO figures (analysis.slo) of one cell at one
level: the values kit's A/B test compares on the log scale. The method: docs/statistics.md, "The cell statistic"
and "Goodput and SLOs".

mean is the ratio of column sums kit always used (``kit.stats.bootstrap.cell_stats``); geomean, trimmed and the
percentiles are taken over the cell's per-request values (TTFT, E2E: every row, timed-out ones censored as for the
mean; TPOT: rows with more than one token; ITL: every inter-chunk gap of the ok requests, as vLLM's percentiles).
Throughput, goodput and SLO attainment are per-cell rates: the statistic does not apply to them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kit.stats import lazy
from kit.stats.bootstrap import CellSample, cell_stat
from kit.stats.metrics import (
    ATTAINMENT,
    C_E2E,
    C_ITL_N,
    C_ITL_SUM,
    C_TPOT,
    C_TPOT_OK,
    C_TTFT,
    GOODPUT,
    THROUGHPUT,
    FArray,
    Metric,
)

CLOCK_RESOLUTION_MS = 1e-6  # the records' clock (time.perf_counter_ns): the geometric mean floors values here, so a
# gap of 0 ms (two chunks taken from the socket in one read share a timestamp) counts instead of making it NaN
PERCENTILE = {"p50": 50.0, "p90": 90.0, "p99": 99.0}
WORDS = {"mean": "mean", "geomean": "geometric mean", "trimmed": "trimmed mean", "p50": "p50", "p90": "p90",
         "p99": "p99"}


@dataclass(frozen=True)
class Slo:
    """Per-request bounds in ms (None: not bounded); a request is good when it is ok and meets every bound."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None

    def as_dict(self) -> dict[str, float | None]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "e2e_ms": self.e2e_ms}


@dataclass(frozen=True)
class CellRule:
    """How a cell becomes one number per metric: the statistic (with its trim) and the SLO."""

    statistic: str = "mean"
    trim: float = 0.1
    slo: Slo | None = None

    def label(self, metric: Metric) -> str:
        """'TPOT p90' for a latency under a statistic other than the mean; the metric's own label otherwise."""
        if self.statistic == "mean" or metric.num is None:
            return metric.label
        return metric.label.replace(" mean", "") + " " + WORDS[self.statistic]


MEAN = CellRule()


def good(cell: CellSample, slo: Slo) -> int:
    """The cell's ok requests meeting every bound (vLLM's ``is_good_req``: bound >= value; a TPOT that is not
    defined, one output token, meets any TPOT bound, as vLLM's TPOT of 0 does); timed-out rows are never good."""
    m = cell.matrix[: cell.matrix.shape[0] - cell.censored]
    keep = np.ones(m.shape[0], dtype=bool)
    if slo.ttft_ms is not None:
        keep &= m[:, C_TTFT] <= slo.ttft_ms
    if slo.tpot_ms is not None:
        keep &= (m[:, C_TPOT_OK] == 0) | (m[:, C_TPOT] <= slo.tpot_ms)
    if slo.e2e_ms is not None:
        keep &= m[:, C_E2E] <= slo.e2e_ms
    return int(keep.sum())


def _requests(cell: CellSample) -> int:
    return cell.matrix.shape[0] if cell.requests is None else cell.requests


def request_values(cell: CellSample, metric: Metric) -> FArray:
    """A latency's per-request values in the cell (ITL: every gap), in ms."""
    m = cell.matrix
    if metric.num in (C_TTFT, C_E2E):
        return m[:, metric.num]
    if metric.num == C_TPOT:
        out: FArray = m[m[:, C_TPOT_OK] > 0, C_TPOT]
        return out
    if metric.num == C_ITL_SUM:
        if cell.gaps is not None:
            return cell.gaps
        rows = m[:, C_ITL_N] > 0
        per: FArray = m[rows, C_ITL_SUM] / m[rows, C_ITL_N]
        return per
    raise ValueError(f"{metric.key} has no per-request values")


def summarize(values: FArray, rule: CellRule) -> float:
    """One statistic of a sample (NaN when empty; geomean: values floored at the clock resolution)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return math.nan
    if rule.statistic == "mean":
        return float(v.mean())
    if rule.statistic == "geomean":
        return float(np.exp(np.log(np.maximum(v, CLOCK_RESOLUTION_MS)).mean()))
    if rule.statistic == "trimmed":
        sps = lazy.stats()
        return float(sps.trim_mean(v, rule.trim))
    return float(np.percentile(v, PERCENTILE[rule.statistic]))


def cell_value(cell: CellSample, metric: Metric, rule: CellRule = MEAN) -> float:
    """The cell statistic of ``metric`` under ``rule``."""
    if metric is GOODPUT or metric is ATTAINMENT or metric.key in (GOODPUT.key, ATTAINMENT.key):
        if rule.slo is None:
            return math.nan
        n = good(cell, rule.slo)
        if metric.key == GOODPUT.key:
            return n / cell.wall_s if cell.wall_s and cell.wall_s > 0 else math.nan
        total = _requests(cell)
        return n / total if total > 0 else math.nan
    if metric.num is None or metric.den is None or rule.statistic == "mean":  # throughput, or the mean's ratio
        return cell_stat(cell, metric)
    return summarize(request_values(cell, metric), rule)


def rate_floor(cell: CellSample, metric: Metric) -> float | None:
    """The floor of a per-cell rate on the log scale: half a count (goodput: half a good request over the cell's wall
    time; attainment: half a request over its requests; throughput: half a token over its wall time), so a cell
    where no request met the SLO (or none produced a token) is compared instead of dropped as log 0. None for
    latencies, and where the cell has no wall time or requests to scale the half count by."""
    if metric.key in (GOODPUT.key, THROUGHPUT.key):
        return 0.5 / cell.wall_s if cell.wall_s and cell.wall_s > 0 else None
    if metric.key == ATTAINMENT.key:
        total = _requests(cell)
        return 0.5 / total if total > 0 else None
    return None


def log_values(cells: Sequence[CellSample], metric: Metric, rule: CellRule = MEAN) -> FArray:
    """(K,) the logs the A/B test compares: log of each cell statistic, a rate floored at ``rate_floor`` (NaN, not
    finite: the cell has no value and is left out, counted by the test's k)."""
    out = np.empty(len(cells), dtype=np.float64)
    for i, c in enumerate(cells):
        v = cell_value(c, metric, rule)
        floor = rate_floor(c, metric)
        if floor is not None and math.isfinite(v) and v >= 0:
            v = max(v, floor)
        out[i] = math.log(v) if math.isfinite(v) and v > 0 else math.nan
    return out


def cell_values(cells: Sequence[CellSample], metric: Metric, rule: CellRule = MEAN) -> FArray:
    """(K,) the cell statistics of ``metric``."""
    return np.array([cell_value(c, metric, rule) for c in cells], dtype=np.float64)


def pooled_value(cells: Sequence[CellSample], metric: Metric, rule: CellRule = MEAN) -> float:
    """The arm's descriptive value: the statistic over its cells' pooled requests (mean: ratio of pooled sums;
    throughput: mean of cells; goodput: pooled good requests over pooled wall time; attainment: pooled fraction)."""
    if not cells:
        return math.nan
    if metric.key == THROUGHPUT.key:
        return float(np.mean([c.tok_s for c in cells]))
    if metric.key in (GOODPUT.key, ATTAINMENT.key):
        if rule.slo is None:
            return math.nan
        n = sum(good(c, rule.slo) for c in cells)
        if metric.key == GOODPUT.key:
            walls = [c.wall_s for c in cells]
            wall = sum(w for w in walls if w)
            return n / wall if wall > 0 and all(walls) else math.nan
        total = sum(_requests(c) for c in cells)
        return n / total if total > 0 else math.nan
    if rule.statistic == "mean":
        assert metric.num is not None and metric.den is not None
        num = sum(float(c.matrix[:, metric.num].sum()) for c in cells)
        den = sum(float(c.matrix[:, metric.den].sum()) for c in cells)
        return num / den if den > 0 else math.nan
    return summarize(np.concatenate([request_values(c, metric) for c in cells]), rule)
