"""What a pilot bundle says for planning (`kit plan --pilot`): per level, the SD of the log cell statistics the
pre-registered test sees (Welch: pooled within arms; blocked: the SD within one-repeat blocks) and how much of
its variance the requests within a cell make (so that a plan can trade repeats for requests per cell).
The method: docs/statistics.md, "Plans from a pilot".

Within-cell variance: each cell's requests are resampled with replacement (REQUEST_RESAMPLES times, seeded by the
cell's id), the cell statistic recomputed; the variance of its log, times the cell's request count, is the
per-request variance w (for a mean, about the requests' squared CV), at most the whole variance the test sees
(σ² n: the requests of a closed loop are not independent draws). The between-cell variance is then
σ_b² = max(0, σ² − w / n) at the pilot's n requests per cell, and a cell of n' requests has σ² = σ_b² + w / n'.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from kit.stats.ab import LevelSamples, block_of
from kit.stats.bootstrap import CellSample
from kit.stats.cellstat import MEAN, CellRule, cell_value, log_values
from kit.stats.metrics import RATES, FArray, Metric

REQUEST_RESAMPLES = 200


@dataclass(frozen=True)
class PilotLevel:
    sd: float  # the SD of the log cell statistics the test sees
    df: int
    cells: int
    within: float | None  # w: per-request variance of the log cell statistic (None: a rate, no requests model)
    requests: float  # mean requests per cell in the pilot

    @property
    def between_var(self) -> float | None:
        """σ_b² at the pilot's requests per cell (None without a requests model)."""
        if self.within is None:
            return None
        return max(0.0, self.sd**2 - self.within / self.requests)


def _logs(cells: Sequence[CellSample], metric: Metric, rule: CellRule) -> FArray:
    return log_values(cells, metric, rule)


def residual_sd(ls: LevelSamples, metric: Metric, rule: CellRule = MEAN,
                method: str = "welch") -> tuple[float, int] | None:
    """The SD the test sees and its df: pooled within arms (welch), or the residual of least squares with an effect
    per arm and per block, one repeat (blocked); None without df."""
    rows: list[tuple[float, str, int]] = []
    for arm, cells in ls.arms.items():
        for c, y in zip(cells, _logs(cells, metric, rule), strict=True):
            if math.isfinite(float(y)):
                rows.append((float(y), arm, block_of(c) if method == "blocked" else 0))
    arms = sorted({a for _, a, _ in rows})
    blocks = sorted({b for _, _, b in rows})
    if not rows:
        return None
    x = np.zeros((len(rows), len(arms) + len(blocks) - 1))
    for i, (_, a, b) in enumerate(rows):
        x[i, arms.index(a)] = 1.0
        if blocks.index(b) > 0:
            x[i, len(arms) + blocks.index(b) - 1] = 1.0
    y = np.array([r[0] for r in rows])
    rank = int(np.linalg.matrix_rank(x))
    df = len(rows) - rank
    if df < 1:
        return None
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ coef
    return math.sqrt(float(resid @ resid) / df), df


def within_variance(cells: Sequence[CellSample], metric: Metric, rule: CellRule = MEAN) -> float | None:
    """w: the mean over cells of n × Var(log cell statistic over resampled requests); None for a rate."""
    if metric.key in {r.key for r in RATES}:
        return None
    parts = []
    for c in cells:
        n = c.matrix.shape[0]
        if n < 2:
            continue
        rng = np.random.default_rng(zlib.crc32(c.cell_id.encode()))
        reps = []
        for _ in range(REQUEST_RESAMPLES):
            idx = rng.integers(0, n, size=n)
            gaps = None
            if c.gaps is not None and c.gaps.size:
                gaps = c.gaps[rng.integers(0, c.gaps.size, size=c.gaps.size)]
            reps.append(cell_value(replace(c, matrix=c.matrix[idx], censored=0, gaps=gaps), metric, rule))
        logs = np.log(np.array(reps))
        logs = logs[np.isfinite(logs)]
        if logs.size >= 2:
            parts.append(float(np.var(logs, ddof=1)) * n)
    return float(np.mean(parts)) if parts else None


def pilot_level(ls: LevelSamples, metric: Metric, rule: CellRule = MEAN, method: str = "welch") -> PilotLevel | None:
    got = residual_sd(ls, metric, rule, method)
    if got is None:
        return None
    cells = [c for v in ls.arms.values() for c in v]
    n = float(np.mean([c.matrix.shape[0] for c in cells]))
    w = within_variance(cells, metric, rule)
    # w / n above the SD the test sees: the requests of a cell are not independent draws (closed-loop waves repeat
    # the same pattern in every cell, so resampling them overstates the variance); capped at all of it
    return PilotLevel(got[0], got[1], len(cells), None if w is None else min(w, got[0] ** 2 * n), n)


def sd_at_requests(level: PilotLevel, sd_bound: float, requests: float) -> float:
    """The SD at ``requests`` per cell from a bound on the pilot's SD: sqrt(σ_b² + w / n'), σ_b² taken from the
    bound (the within-cell part is measured on many requests; the between-cell part carries the uncertainty)."""
    if level.within is None:
        return sd_bound
    between = max(0.0, sd_bound**2 - level.within / level.requests)
    return math.sqrt(between + level.within / requests)
