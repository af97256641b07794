"""The two-stage bootstrap of one arm at one level, its small-sample calibration, and extrapolated intervals.

Replicates draw the arm's ok cells (repeats) with replacement, then the requests of every drawn cell with
replacement, and recompute each statistic from column sums (throughput: the mean of the drawn cells'
throughputs). With one cell, cells stay fixed and only requests are resampled (throughput through Little's law).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kit.stats.metrics import C_E2E, C_TOKENS, N_COLS, FArray, IArray, Metric
from kit.stats.tdist import t_quantile, z_quantile

CENTRAL_TAIL = 0.025  # the bootstrap percentiles that are measured, then extrapolated
MAX_GATHER = 1 << 21  # elements per bootstrap gather batch (bounds memory on large runs)


@dataclass(frozen=True)
class CellSample:
    """What the A/B comparison needs of one included cell at one level."""

    cell_id: str
    matrix: FArray  # (ok requests, then the censored timed-out ones, N_COLS)
    tok_s: float
    repeat: int | None = None  # the cell's repeat: its ABBA block (the blocked analysis pairs cells by it)
    censored: int = 0  # timed-out requests: the last rows of ``matrix`` (never good under an SLO)
    requests: int | None = None  # every request of the cell at the level, failed ones too (None: matrix rows)
    wall_s: float | None = None  # the level's wall time in the cell (goodput's denominator)
    gaps: FArray | None = None  # every inter-chunk gap of the ok requests (ITL statistics other than the mean)

    @functools.cached_property
    def column_sums(self) -> FArray:
        """``matrix.sum(axis=0)``, made once per cell (a comparison reads each cell's mean statistics once per
        metric, test and family); read-only, like the matrix it sums."""
        sums: FArray = self.matrix.sum(axis=0)
        sums.flags.writeable = False
        return sums


def cell_stats(cells: Sequence[CellSample], metrics: Sequence[Metric]) -> FArray:
    """(K, metrics) per-cell statistics: ``_stat_from_sums`` on each cell's column sums."""
    if not cells:
        return np.full((0, len(metrics)), np.nan)
    sums = np.stack([c.column_sums for c in cells])
    return _stat_from_sums(sums, np.array([c.tok_s for c in cells], dtype=float), metrics)


def cell_stat(cell: CellSample, metric: Metric) -> float:
    """One cell's statistic of ``metric`` (an entry of ``cell_stats``): its throughput, or the ratio of its
    column sums, NaN where the denominator is not > 0. The same float64 division as ``_stat_from_sums``, on
    scalars: a comparison asks for one cell's statistic thousands of times, and a one-row array cost most of it."""
    if metric.num is None or metric.den is None:
        return float(cell.tok_s)
    sums = cell.column_sums
    den = float(sums[metric.den])
    return float(sums[metric.num]) / den if den > 0 else math.nan  # Python's float division: IEEE, no warnings


def _stat_from_sums(sums: FArray, tok_s: FArray, metrics: Sequence[Metric]) -> FArray:
    """(rows, metrics): per row of column sums (and its throughput ``tok_s``) each metric's statistic, the
    throughput itself or the ratio of two column sums, NaN where the denominator is not > 0."""
    out = np.empty((sums.shape[0], len(metrics)))
    with np.errstate(divide="ignore", invalid="ignore"):
        for j, m in enumerate(metrics):
            if m.num is None or m.den is None:
                out[:, j] = tok_s
            else:
                out[:, j] = np.where(sums[:, m.den] > 0, sums[:, m.num] / sums[:, m.den], np.nan)
    return out


@dataclass(frozen=True)
class ArmBootstrap:
    observed: FArray  # (metrics,) the arm's statistics
    replicates: FArray  # (B, metrics)
    cell_stats: FArray  # (K, metrics)


def bootstrap_arm(cells: Sequence[CellSample], metrics: Sequence[Metric], resamples: int,
                  rng: np.random.Generator, *, hierarchical: bool) -> ArmBootstrap:
    """Replicates of each metric's statistic for one arm at one level.

    hierarchical: cells drawn with replacement, then each drawn cell's requests with replacement; throughput is
    the mean of the drawn cells' throughputs. Otherwise cells stay fixed, requests are resampled within each,
    and throughput follows the resampled output tokens per second of request time (Little's law).
    """
    k = len(cells)
    total = np.sum([c.matrix.sum(axis=0) for c in cells], axis=0)
    tok_cells = np.array([c.tok_s for c in cells])
    observed = _stat_from_sums(total[None, :], np.array([tok_cells.mean()]), metrics)[0]
    fixed = np.broadcast_to(np.arange(k), (resamples, k))
    choice = rng.integers(0, k, size=(resamples, k)) if hierarchical else fixed
    sums = np.zeros((resamples, N_COLS))
    for c, cell in enumerate(cells):
        rows = np.nonzero(choice == c)[0]
        _add_request_resamples(sums, rows, cell.matrix, rng)
    if hierarchical:
        tok_rep = tok_cells[choice].mean(axis=1)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = (sums[:, C_TOKENS] / sums[:, C_E2E]) / (total[C_TOKENS] / total[C_E2E])
        tok_rep = tok_cells.mean() * rate
    return ArmBootstrap(observed, _stat_from_sums(sums, tok_rep, metrics), cell_stats(cells, metrics))


def _add_request_resamples(sums: FArray, rows: IArray, matrix: FArray, rng: np.random.Generator) -> None:
    """For each replicate index in ``rows``, add the column sums of one with-replacement resample of ``matrix``.

    Columns that are constant within the cell (the count, usually the token count) add n x value without
    gathering; the others are gathered column by column from int32 indices, in batches of MAX_GATHER elements.
    """
    n = matrix.shape[0]
    if n == 0 or rows.size == 0:
        return
    b = sums.shape[0]
    cols = np.ascontiguousarray(matrix.T)
    varying = [j for j in range(N_COLS) if cols[j].min() != cols[j].max()]
    times = np.bincount(rows, minlength=b).astype(np.float64)
    for j in range(N_COLS):
        if j not in varying:
            sums[:, j] += times * (n * cols[j, 0])
    if not varying:
        return
    batch = max(1, MAX_GATHER // n)
    for start in range(0, rows.size, batch):
        part = rows[start:start + batch]
        idx = rng.integers(0, n, size=(part.size, n), dtype=np.int32)
        for j in varying:
            drawn = np.take(cols[j], idx).sum(axis=1)
            sums[:, j] += np.bincount(part, weights=drawn, minlength=b)


def calibrated_log_replicates(boot: ArmBootstrap, *, calibrate: bool) -> FArray:
    """Log replicates, rescaled per metric so their variance is the unbiased between-cell variance / K."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(boot.replicates)
        cell_logs = np.log(boot.cell_stats)
    if not calibrate:
        return logs
    out = logs.copy()
    for j in range(logs.shape[1]):
        y = cell_logs[:, j][np.isfinite(cell_logs[:, j])]
        r = logs[:, j][np.isfinite(logs[:, j])]
        if y.size < 2 or r.size < 2:
            continue
        var_boot = float(np.var(r, ddof=1))
        if var_boot <= 0:
            continue
        factor = math.sqrt(float(np.var(y, ddof=1)) / y.size / var_boot)
        center = float(np.mean(r))
        out[:, j] = center + factor * (logs[:, j] - center)
    return out


def extrapolated_interval(estimate: float, replicates: FArray, tail: float, df: int | None) -> tuple[float, float]:
    """A percentile interval with two-sided tail ``tail`` (e.g. alpha/m), extrapolated from the central one.

    The distances from the replicates' median to their 2.5 and 97.5 % percentiles are multiplied by
    crit(1 - tail/2) / z(0.975), where crit is Student's t with ``df`` (the normal when None), and laid off
    from the point estimate.
    """
    r = replicates[np.isfinite(replicates)]
    if r.size == 0 or not math.isfinite(estimate):
        return math.nan, math.nan
    med, q_lo, q_hi = np.percentile(r, [50.0, 100 * CENTRAL_TAIL, 100 * (1 - CENTRAL_TAIL)])
    stretch = t_quantile(1 - tail / 2, df) / z_quantile(1 - CENTRAL_TAIL)
    return estimate - stretch * float(med - q_lo), estimate + stretch * float(q_hi - med)
