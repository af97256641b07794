"""An independent generator of simulated A/B experiments for the simulation suite (not tests/support's factory).

Each cell has a random intercept (a lognormal multiplier shared by every level, like one server lifetime), each
cell x level a smaller extra multiplier, and each request lognormal TTFT and token gaps. Records are the raw
dicts the load generator writes, so they go through ``reduce_records`` and ``compare_levels`` like real data.
Timed-out requests (``timeout_frac``) are each cell's slowest: the client gives up at the cell's
(1 - timeout_frac) quantile of E2E, so they are censored there (the survivorship case of issue 10).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kit.stats import CellSample, LevelSamples, reduce_records

MS = 1_000_000


@dataclass(frozen=True)
class SimArm:
    tpot_factor: float = 1.0  # true effect on the per-token gap
    cells: int = 3
    cell_sd: float = 0.03  # between-cell sd of the log multiplier
    timeout_frac: float = 0.0
    error_frac: float = 0.0


@dataclass(frozen=True)
class SimDesign:
    arms: dict[str, SimArm] = field(default_factory=lambda: {"a": SimArm(), "b": SimArm()})
    levels: tuple[int, ...] = (1, 4)
    requests: int = 16
    tokens: int = 8
    tpot_ms: float = 5.0
    ttft_ms: float = 20.0
    level_sd: float = 0.01


def _records(rng: np.random.Generator, d: SimDesign, arm: SimArm, mult: float, level: int) -> list[dict[str, Any]]:
    load = 1 + 0.05 * math.log2(level)
    out = []
    n = d.requests
    failed = rng.random(n) < arm.error_frac
    ttfts = d.ttft_ms * mult * load * rng.lognormal(0, 0.2, n)
    gaps_all = d.tpot_ms * arm.tpot_factor * mult * load * rng.lognormal(0, 0.1, (n, d.tokens - 1))
    ends = ttfts + gaps_all.sum(axis=1)
    timeout = float(np.quantile(ends, 1 - arm.timeout_frac)) if arm.timeout_frac > 0 else math.inf
    slow = ends > timeout
    for i in range(n):
        ttft = float(ttfts[i])
        chunks = np.concatenate([[ttft], ttft + np.cumsum(gaps_all[i])])
        rec: dict[str, Any] = {"status": 200, "error": None, "wall_start": 1000.0 + i * 0.01,
                               "ttft_ns": int(ttft * MS), "chunk_ns": [int(c * MS) for c in chunks],
                               "e2e_ns": int((chunks[-1] + 0.5) * MS), "usage_completion_tokens": d.tokens,
                               "client_tokens": d.tokens}
        if slow[i]:
            got = [int(c * MS) for c in chunks if c < timeout]
            rec.update(error=f"timeout after {timeout / 1000:g} s", e2e_ns=int(timeout * MS),
                       chunk_ns=got, ttft_ns=got[0] if got else None, usage_completion_tokens=None,
                       client_tokens=len(got))
            if not got:
                rec["status"] = None
        elif failed[i]:
            rec.update(status=500, error="http 500", ttft_ns=None, chunk_ns=[], usage_completion_tokens=None)
        out.append(rec)
    return out


def simulate(rng: np.random.Generator, d: SimDesign) -> list[LevelSamples]:
    mults = {a: rng.lognormal(0, spec.cell_sd, spec.cells) for a, spec in d.arms.items()}
    out = []
    for level in d.levels:
        arms: dict[str, list[CellSample]] = {}
        failures: dict[str, tuple[int, int]] = {}
        for a, spec in d.arms.items():
            cells, failed, total = [], 0, 0
            for k in range(spec.cells):
                mult = float(mults[a][k]) * float(rng.lognormal(0, d.level_sd))
                lr = reduce_records(_records(rng, d, spec, mult, level))
                failed, total = failed + lr.errors, total + lr.requests
                e2e = lr.matrix[: lr.ok, 1].mean() if lr.ok else math.nan
                tok_s = level * d.tokens / (e2e / 1000) if lr.ok else math.nan
                if lr.ok:
                    cells.append(CellSample(f"{a}-r{k}", lr.matrix, tok_s))
            arms[a] = cells
            failures[a] = (failed, total)
        out.append(LevelSamples(level, arms, dict.fromkeys(d.arms, False), dict.fromkeys(d.arms), failures))
    return out
