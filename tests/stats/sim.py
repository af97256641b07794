"""An independent generator of simulated A/B experiments for the simulation suite (not tests/support's bundle
factory, and no kit code in the data it makes).

One experiment: the cells (arm x repeat) in kit's real plan order (``kit.plan.make_plan`` with the design's order
and a seed drawn per experiment; an arm with fewer cells lost its last repeats, as a failed cell does), each cell
a server lifetime driven through every level. Per cell a lognormal random intercept shared by every level
(``cell_sd``), a drift multiplier exp(drift x run position), with probability ``bad_start_frac`` a bad start
(+20-50 % on every latency of the cell, at every level); per cell x level a smaller lognormal multiplier
(``level_sd``). Requests run closed-loop on ``level`` streams: requests of one wave share a batch multiplier
(``batch_sd``), TTFT and each token gap have lognormal tails. An arm's true effect multiplies its token gaps
(TPOT and ITL) at the levels it names. Timeouts are each cell's slowest requests: Binomial(requests,
``timeout_frac``) of them per cell x level; the client gives up between the last of them to finish and the first
that does not, and keeps the chunks that arrived. Errors
(``error_frac``) are HTTP 500s at random, 1 ms each.

Records are the raw dicts the load generator writes; ``simulate`` feeds them through kit's real path
(``reduce_records`` -> ``cell_level_figures`` -> ``summarize_level``), and the caller through ``compare_levels``.

``python -m tests.stats.sim --write-table docs/statistics.md`` runs the full simulation (tests/stats/sim_run.py)
and rewrites the table between the markers (tests/stats/sim_table.py).
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kit.manifest import Manifest
from kit.plan import make_plan
from kit.stats import CellSample, LevelRecords, LevelSamples, reduce_records, throughput

MS = 1_000_000  # ns per ms
ARMS = ("a", "b")  # "a" is the baseline


@dataclass(frozen=True)
class SimArm:
    cells: int = 3
    cell_sd: float = 0.03  # between-cell sd of the log multiplier (one server lifetime, shared by its levels)
    tpot_effect: float = 1.0  # true multiplier of the token gaps (TPOT and ITL), e.g. 0.9: 10 % faster
    effect_levels: tuple[int, ...] | None = None  # levels where the effect applies (None: all)
    timeout_frac: float = 0.0  # the slowest fraction of each cell x level times out
    error_frac: float = 0.0  # HTTP 500s at random

    def effect_at(self, level: int) -> float:
        return self.tpot_effect if self.effect_levels is None or level in self.effect_levels else 1.0


def _aa_arms() -> dict[str, SimArm]:
    return {"a": SimArm(), "b": SimArm()}


@dataclass(frozen=True)
class SimDesign:
    arms: dict[str, SimArm] = field(default_factory=_aa_arms)
    levels: tuple[int, ...] = (1, 4, 16, 64)
    requests: int = 16  # per cell x level
    tokens: int = 8
    tpot_ms: float = 5.0
    ttft_ms: float = 20.0
    level_sd: float = 0.01  # cell x level
    batch_sd: float = 0.02  # shared by the requests of one wave
    ttft_sd: float = 0.35  # per request, lognormal
    gap_sd: float = 0.2  # per token gap, lognormal
    order: str = "abba"  # kit's design.order
    drift: float = 0.0  # log multiplier per run position (0.01: 1 % per cell)
    bad_start_frac: float = 0.0
    bad_start_shift: tuple[float, float] = (0.2, 0.5)

    def true_ratio(self, level: int, arm: str = "b", baseline: str = "a") -> float:
        """The true TPOT (and ITL) ratio arm/baseline at a level."""
        return self.arms[arm].effect_at(level) / self.arms[baseline].effect_at(level)


@dataclass(frozen=True)
class Experiment:
    levels: list[LevelSamples]  # what compare_levels takes
    records: dict[tuple[str, int], list[list[dict[str, Any]]]]  # (arm, level) -> every cell's raw records
    reduced: dict[tuple[str, int], list[tuple[str, LevelRecords]]]  # (arm, level) -> (cell id, reduced records)


@functools.lru_cache(maxsize=512)
def run_order(order: str, repeats: int, seed: int) -> tuple[tuple[str, int], ...]:
    """(arm, repeat) of every planned cell in kit's run order."""
    data = {"manifest_version": 1, "name": "sim", "runtime": "process", "model": {"served_name": "sim"},
            "server": {"command": ["true", "{host}", "{port}", "{served_name}"], "port": 18080},
            "arms": [{"name": a} for a in ARMS], "load": {"levels": [1]},
            "design": {"repeats": repeats, "order": order, "seed": seed}}
    return tuple((c.arm, c.repeat) for c in make_plan(Manifest.model_validate(data)).cells)


def _records(rng: np.random.Generator, d: SimDesign, arm: SimArm, mult: float, level: int) -> list[dict[str, Any]]:
    n, k = d.requests, d.tokens
    waves = np.arange(n) // level
    batch = rng.lognormal(0, d.batch_sd, waves[-1] + 1)[waves]
    ttft = d.ttft_ms * mult * (1 + 0.25 * math.log2(level)) * batch * rng.lognormal(0, d.ttft_sd, n)
    gap_ms = d.tpot_ms * arm.effect_at(level) * mult * (1 + 0.05 * math.log2(level))
    gaps = gap_ms * batch[:, None] * rng.lognormal(0, d.gap_sd, (n, k - 1))
    chunks = np.concatenate([ttft[:, None], ttft[:, None] + np.cumsum(gaps, axis=1)], axis=1)
    e2e = chunks[:, -1].copy()
    slow = rng.binomial(n, arm.timeout_frac) if arm.timeout_frac > 0 else 0  # how many time out this time
    ranked = np.sort(e2e)
    limit = float(ranked[n - slow - 1] + ranked[n - slow]) / 2 if slow else math.inf
    failed = rng.random(n) < arm.error_frac
    took = np.where(failed, 1.0, np.minimum(e2e, limit))
    # closed loop: request i runs on stream i % level after the previous request of that stream (1 ms apart)
    starts = np.zeros(n)
    for i in range(level, n):
        starts[i] = starts[i - level] + took[i - level] + 1.0
    chunk_ns = (chunks * MS).astype(np.int64).tolist()
    out = []
    for i in range(n):
        rec: dict[str, Any] = {"status": 200, "error": None, "wall_start": 1000.0 + starts[i] / 1000,
                               "ttft_ns": chunk_ns[i][0], "chunk_ns": chunk_ns[i], "e2e_ns": chunk_ns[i][-1],
                               "usage_completion_tokens": k, "client_tokens": k}
        if failed[i]:
            rec.update(status=500, error="http 500", ttft_ns=None, chunk_ns=[], e2e_ns=MS,
                       usage_completion_tokens=None, client_tokens=0)
        elif e2e[i] > limit:
            got = [c for c in chunk_ns[i] if c < limit * MS]
            rec.update(error=f"timeout after {limit / 1000:g} s", e2e_ns=int(limit * MS), chunk_ns=got,
                       ttft_ns=got[0] if got else None, usage_completion_tokens=None, client_tokens=len(got))
            if not got:
                rec["status"] = None
        out.append(rec)
    return out


def level_samples(level: int, cells: dict[str, list[tuple[str, LevelRecords]]]) -> LevelSamples:
    """What ``kit.stats.summary.summarize_level`` hands to the comparison for cells with no client.json or
    server metrics (test_stats_simulation checks that the two agree), without its descriptive figures, which
    cost three quarters of the time of a simulated experiment and play no part in a verdict."""
    return LevelSamples(
        level=level,
        arms={a: [CellSample(cid, lr.matrix, throughput(lr)[1] or 0.0, repeat=int(cid.rsplit("-r", 1)[1]))
                  for cid, lr in v if lr.ok]
              for a, v in cells.items()},
        client_bound=dict.fromkeys(cells, False),
        experts=dict.fromkeys(cells),
        failures={a: (sum(lr.errors for _, lr in v), sum(lr.requests for _, lr in v)) for a, v in cells.items()},
        ttft_client_bound=dict.fromkeys(cells, False),
    )


def simulate(rng: np.random.Generator, d: SimDesign) -> Experiment:
    """One experiment: every cell's records at every level, reduced by kit, as the comparison takes them."""
    repeats = max(a.cells for a in d.arms.values())
    order = run_order(d.order, repeats, int(rng.integers(0, 256)))
    mults: dict[tuple[str, int], float] = {}
    for pos, (arm, rep) in enumerate(order):
        spec = d.arms[arm]
        if rep > spec.cells:
            continue  # a failed cell: it held its place in the run order and left no records
        bad = 1 + rng.uniform(*d.bad_start_shift) if rng.random() < d.bad_start_frac else 1.0
        mults[(arm, rep)] = float(rng.lognormal(0, spec.cell_sd)) * math.exp(d.drift * pos) * bad
    levels: list[LevelSamples] = []
    records: dict[tuple[str, int], list[list[dict[str, Any]]]] = {}
    reduced: dict[tuple[str, int], list[tuple[str, LevelRecords]]] = {}
    for level in d.levels:
        cells: dict[str, list[tuple[str, LevelRecords]]] = {a: [] for a in ARMS}
        for (arm, rep), m in mults.items():
            recs = _records(rng, d, d.arms[arm], m * float(rng.lognormal(0, d.level_sd)), level)
            records.setdefault((arm, level), []).append(recs)
            cells[arm].append((f"{arm}-r{rep}", reduce_records(recs)))
        for arm, v in cells.items():
            reduced[(arm, level)] = v
        levels.append(level_samples(level, cells))
    return Experiment(levels, records, reduced)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from sim_table import main

    raise SystemExit(main(sys.argv[1:]))
