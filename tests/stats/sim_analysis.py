"""An independent generator for the analysis choices (analysis.method, analysis.statistic) and its simulation:
cells in ABBA order written here (not kit.plan), request latencies drawn here with numpy, and only kit's test
(``kit.stats.ab.run_test`` / ``compare_levels``) applied. docs/statistics.md, "Blocked or Welch" and "The cell
statistic", hold the table ``python -m tests.stats.sim_analysis`` prints.

One experiment, two arms a (baseline) and b, K repeats each, in ABBA order with a random start: block r holds
repeat r of both arms, in the order (a, b) for odd r and (b, a) for even r (or the reverse). Each cell's latency
scale is exp(effect·[b] + drift(position) + cell noise); within a cell, n requests each exp(scale + request noise).
Drift: none; linear (the whole run drifts by ``drift`` on the log scale); ar1 (an AR(1) process of the run
position, coefficient 0.8, marginal SD ``drift``). Cell noise: normal or Student-t with 3 df (heavy), SD
``cell_sd``. Request noise: lognormal with SD ``req_sigma``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from kit.stats import CellSample
from kit.stats.ab import run_test
from kit.stats.cellstat import CellRule
from kit.stats.metrics import N_COLS, TESTED

TPOT = next(m for m in TESTED if m.key == "tpot_mean_ms")


@dataclass(frozen=True)
class Scenario:
    repeats: int = 8
    cell_sd: float = 0.10
    drift: str = "none"  # none | linear | ar1
    drift_size: float = 0.3
    heavy_cells: bool = False
    requests: int = 32
    req_sigma: float = 0.3
    effect: float = 0.0  # log(b / a)


def positions(rng: np.random.Generator, k: int) -> dict[tuple[str, int], int]:
    """Run position of (arm, repeat) in ABBA order with a random start."""
    first = ("a", "b") if rng.random() < 0.5 else ("b", "a")
    order = [(arm, r) for r in range(1, k + 1) for arm in (first if r % 2 else first[::-1])]
    return {cell: i for i, cell in enumerate(order)}


def _drift(rng: np.random.Generator, s: Scenario, n: int) -> np.ndarray:
    if s.drift == "linear":
        return np.linspace(0.0, s.drift_size, n) * (1 if rng.random() < 0.5 else -1)
    if s.drift == "ar1":
        phi = 0.8
        out = np.empty(n)
        out[0] = rng.normal(0, s.drift_size)
        for i in range(1, n):
            out[i] = phi * out[i - 1] + rng.normal(0, s.drift_size * np.sqrt(1 - phi**2))
        return out
    return np.zeros(n)


def experiment(rng: np.random.Generator, s: Scenario) -> dict[str, list[CellSample]]:
    pos = positions(rng, s.repeats)
    drift = _drift(rng, s, len(pos))
    out: dict[str, list[CellSample]] = {"a": [], "b": []}
    for (arm, r), i in pos.items():
        noise = rng.standard_t(3) / np.sqrt(3.0) if s.heavy_cells else rng.normal()
        scale = (s.effect if arm == "b" else 0.0) + drift[i] + s.cell_sd * noise
        tpot = 20.0 * np.exp(scale + s.req_sigma * rng.normal(size=s.requests))
        m = np.zeros((s.requests, N_COLS))
        m[:, 2], m[:, 3], m[:, 7] = tpot, 1.0, 1.0  # C_TPOT, C_TPOT_OK, C_ONE
        m[:, 0] = m[:, 1] = tpot * 10
        out[arm].append(CellSample(f"{arm}-r{r}", m, 1000.0 / float(tpot.mean()), repeat=r))
    return out


def rejection_rate(s: Scenario, method: str, rule: CellRule, sims: int, tail: float, seed: int = 0) -> float:
    """The fraction of experiments whose test rejects at two-sided ``tail``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        arms = experiment(rng, s)
        r = run_test(arms["b"], arms["a"], TPOT, rule, method)
        hits += r is not None and r.p <= tail
    return hits / sims


METHODS = ("welch", "blocked")
SCENARIOS = {
    "no drift": Scenario(),
    "linear drift 0.3": Scenario(drift="linear"),
    "AR(1) drift 0.1": Scenario(drift="ar1", drift_size=0.1),
    "heavy-tailed cells": Scenario(heavy_cells=True),
}


def method_table(sims: int = 2000, tail: float = 0.025) -> list[str]:
    """Rows: scenario x repeats; columns: each method's A/A rate and power for a 10 % effect."""
    rows = ["| scenario | repeats | " + " | ".join(f"{m} A/A | {m} power" for m in METHODS) + " |",
            "|---|---:|" + "---:|---:|" * len(METHODS)]
    for name, base in SCENARIOS.items():
        for k in (4, 8):
            s = Scenario(**{**base.__dict__, "repeats": k})
            cells = []
            for m in METHODS:
                aa = rejection_rate(s, m, CellRule(), sims, tail, seed=1)
                pw = rejection_rate(Scenario(**{**s.__dict__, "effect": np.log(1.1)}), m, CellRule(), sims, tail, 2)
                cells += [f"{100 * aa:.1f} %", f"{100 * pw:.0f} %"]
            rows.append(f"| {name} | {k} | " + " | ".join(cells) + " |")
    return rows


STATISTICS = ("mean", "geomean", "trimmed", "p50", "p90", "p99")


def statistic_table(sims: int = 2000, tail: float = 0.025) -> list[str]:
    """Rows: request tails; columns: each statistic's A/A rate and power for a 20 % effect (Welch, 8 repeats)."""
    rows = ["| requests | " + " | ".join(f"{st} A/A / power" for st in STATISTICS) + " |",
            "|---|" + "---:|" * len(STATISTICS)]
    for sigma in (0.3, 1.0):
        s = Scenario(cell_sd=0.05, req_sigma=sigma, requests=64)
        cells = []
        for st in STATISTICS:
            aa = rejection_rate(s, "welch", CellRule(statistic=st), sims, tail, seed=3)
            pw = rejection_rate(Scenario(**{**s.__dict__, "effect": np.log(1.2)}), "welch", CellRule(statistic=st),
                                sims, tail, 4)
            cells.append(f"{100 * aa:.1f} % / {100 * pw:.0f} %")
        rows.append(f"| lognormal σ {sigma:g}, 64 per cell | " + " | ".join(cells) + " |")
    return rows


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    print("\n".join(method_table(n)))
    print()
    print("\n".join(statistic_table(n)))
