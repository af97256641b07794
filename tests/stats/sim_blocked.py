"""An independent generator for the blocked test's validity and power (docs/statistics.md, "Blocked or Welch"):
ABBA order with a random start, drift, failed cells and unequal arm variances written here with numpy; only kit's
public ``kit.stats.ab.run_test`` applied (THROUGHPUT: one number per cell). ``python -m tests.stats.sim_blocked``
prints the table; ``BLOCK=1|2`` (environment) sets ``kit.stats.ab.BLOCK_REPEATS`` to compare block sizes."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace

import numpy as np

from kit.stats import ab
from kit.stats.bootstrap import CellSample
from kit.stats.metrics import N_COLS, THROUGHPUT

Z = np.zeros((1, N_COLS))


@dataclass(frozen=True)
class Case:
    repeats: int = 6
    sd: float = 0.10
    noisy: float = 1.0  # the SD multiplier of one arm's cells
    noisy_arm: str = "b"
    fail: int = 0  # cells of the noisy arm (or either arm when noisy == 1) dropped at random
    drift: float = 0.0  # linear over the run, end to end, on the log scale
    ar: float = 0.0  # AR(1) coefficient of the run position (marginal SD 0.1)
    effect: float = 0.0


def cells(rng: np.random.Generator, c: Case) -> dict[str, list[CellSample]]:
    first = ["a", "b"] if rng.random() < 0.5 else ["b", "a"]
    seq = [(arm, r) for r in range(1, c.repeats + 1) for arm in (first if r % 2 else first[::-1])]
    n = len(seq)
    d = c.drift * np.arange(n) / max(n - 1, 1) * (1 if rng.random() < 0.5 else -1)
    if c.ar:
        x = np.empty(n)
        x[0] = rng.normal(0, 0.1)
        for i in range(1, n):
            x[i] = c.ar * x[i - 1] + rng.normal(0, 0.1 * np.sqrt(1 - c.ar**2))
        d = d + x
    e = rng.normal(0.0, c.sd, n) * np.array([c.noisy if a == c.noisy_arm else 1.0 for a, _ in seq])
    y = np.exp(5 + d + e + np.array([c.effect if a == "b" else 0.0 for a, _ in seq]))
    out = [CellSample(f"{a}-r{r}", Z, float(v), repeat=r) for (a, r), v in zip(seq, y, strict=True)]
    if c.fail:
        cand = [i for i, s in enumerate(out) if c.noisy == 1.0 or s.cell_id.startswith(c.noisy_arm)]
        drop = set(rng.choice(cand, c.fail, replace=False).tolist())
        out = [s for i, s in enumerate(out) if i not in drop]
    return {a: [s for s in out if s.cell_id.startswith(a + "-")] for a in "ab"}


def rate(c: Case, method: str, sims: int, alpha: float = 0.05, seed: int = 1) -> float:
    """The fraction of experiments whose test of b v a rejects at two-sided ``alpha`` (no verdict: no rejection)."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        arms = cells(rng, c)
        w = ab.run_test(arms["b"], arms["a"], THROUGHPUT, method=method)
        hits += int(w is not None and w.p <= alpha)
    return hits / sims


NULLS = {
    "equal variance": Case(),
    "b 3x noisier": Case(noisy=3.0),
    "b 3x noisier, 1 b cell failed": Case(noisy=3.0, fail=1),
    "a (baseline) 3x noisier, 1 a cell failed": Case(noisy=3.0, noisy_arm="a", fail=1),
    "2 failed cells": Case(fail=2),
    "linear drift 0.3": Case(drift=0.3),
    "AR(1) 0.9": Case(ar=0.9),
}
POWER = {"no drift": Case(effect=float(np.log(1.1))), "linear drift 0.3": Case(effect=float(np.log(1.1)), drift=0.3),
         "AR(1) 0.9": Case(effect=float(np.log(1.1)), ar=0.9)}


def main(sims: int, repeats: tuple[int, ...]) -> None:
    print(f"# BLOCK_REPEATS={ab.BLOCK_REPEATS} sims={sims} alpha=0.05; A/A false alarms, then power for +10 %")
    for name, c in NULLS.items():
        row = [f"{100 * rate(replace(c, repeats=k), m, sims):.1f}" for k in repeats for m in ("welch", "blocked")]
        print(f"A/A  {name:44s} " + " ".join(row), flush=True)
    for name, c in POWER.items():
        row = [f"{100 * rate(replace(c, repeats=k), m, sims, seed=2):.1f}" for k in repeats for m in ("welch", "blocked")]
        print(f"pow  {name:44s} " + " ".join(row), flush=True)


if __name__ == "__main__":
    ab.BLOCK_REPEATS = int(os.environ.get("BLOCK", str(ab.BLOCK_REPEATS)))
    ks = tuple(int(a) for a in sys.argv[2:]) or (2, 3, 4, 5, 6, 8)
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, ks)
