"""An independent simulation of kit's sequential design (design.sequential): its own generator of cells (no kit
code makes the data) and scipy's Welch test (``scipy.stats.ttest_ind(equal_var=False)``, not kit's), with kit's
``holm_sequential`` making the decisions at each look, exactly as ``kit.stats.looks`` feeds it.

One experiment: m primary comparisons (levels x one non-baseline arm), a look after each block (two repeats per
arm); per cell a lognormal random intercept shared by every level (between-cell CV ``cv``) and a smaller
cell x level term; the arm's true effect multiplies its cells at every level. Stop when every comparison is
rejected (efficacy) or at the maximum. Reported: family-wise error (A/A: any rejection), power (per
comparison), the mean cells used, and the fixed design of equal power (the smallest repeats whose power, with
Holm at the end only, is at least the sequential one's) so that the saving in cells is a like-for-like one.

``python -m tests.stats.sim_sequential --write-table docs/statistics.md`` rewrites the table between its markers.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

from kit.stats.sequential import Hypothesis, holm_sequential
from tests.stats import sim_rci
from tests.stats.doc_tables import replace_between

BEGIN = "<!-- sim-sequential:begin (python -m tests.stats.sim_sequential --write-table docs/statistics.md) -->"
END = "<!-- sim-sequential:end -->"


@dataclass(frozen=True)
class Design:
    cv: float = 0.10  # between-cell CV of the primary metric
    max_repeats: int = 8  # per arm
    levels: int = 2  # m: the primary family (levels x 1 arm)
    effect: float = 1.0  # the arm's true ratio (1: A/A)
    spending: str = "obrien-fleming"
    alpha: float = 0.05


def _cells(rng: np.random.Generator, d: Design, runs: int) -> tuple[np.ndarray, np.ndarray]:
    """log cell values (runs, repeats, levels) of the baseline and of the arm."""
    sd = math.sqrt(math.log(1 + d.cv**2))
    shape = (runs, d.max_repeats, 1)
    def arm(mult: float) -> np.ndarray:
        shared = rng.normal(0, sd * math.sqrt(0.8), shape)
        own = rng.normal(0, sd * math.sqrt(0.2), (runs, d.max_repeats, d.levels))
        return math.log(mult) + shared + own
    return arm(1.0), arm(d.effect)


def simulate(d: Design, runs: int, seed: int = 0) -> dict[str, float]:
    """Sequential: family-wise error, power per comparison, mean cells (both arms); the fixed design's at max."""
    rng = np.random.default_rng(seed)
    base, arm = _cells(rng, d, runs)
    looks = d.max_repeats // 2
    pvals = np.ones((runs, looks, d.levels))
    for k in range(looks):
        n = 2 * (k + 1)
        pvals[:, k, :] = sps.ttest_ind(arm[:, :n, :], base[:, :n, :], axis=1, equal_var=False).pvalue
    any_rej = rejections = cells = 0.0
    for r in range(runs):
        for k in range(looks):
            fr = tuple((j + 1) / looks for j in range(k + 1))
            hyps = [Hypothesis(fr, tuple(float(p) for p in pvals[r, : k + 1, i])) for i in range(d.levels)]
            dec = holm_sequential(hyps, d.alpha, d.spending, final=k == looks - 1)
            rejected = [x.rejected_at is not None for x in dec]
            if all(rejected) or k == looks - 1:
                any_rej += any(rejected)
                rejections += sum(rejected) / d.levels
                cells += 2 * 2 * (k + 1)
                break
    return {"any_rejection": any_rej / runs, "power": rejections / runs, "cells": cells / runs}


def fixed_power(d: Design, repeats: int, runs: int, seed: int = 1) -> float:
    """Power per comparison of a fixed design of ``repeats`` per arm, Holm over the family at the end."""
    rng = np.random.default_rng(seed)
    base, arm = _cells(rng, Design(d.cv, repeats, d.levels, d.effect, d.spending, d.alpha), runs)
    p = sps.ttest_ind(arm, base, axis=1, equal_var=False).pvalue  # (runs, levels)
    order = np.sort(p, axis=1)
    m = d.levels
    steps = order <= d.alpha / (m - np.arange(m))[None, :]
    held = np.cumprod(steps, axis=1)  # Holm: rejected while every smaller p was
    return float(held.sum(axis=1).mean() / m)


def equal_power_cells(d: Design, target: float, runs: int) -> float:
    """The cells (both arms) of the smallest fixed design whose power reaches ``target`` (linear between)."""
    prev_n, prev_p = 2, fixed_power(d, 2, runs)
    for n in range(3, 200):
        p = fixed_power(d, n, runs)
        if p >= target:
            frac = 0.0 if p == prev_p else (target - prev_p) / (p - prev_p)
            return 2 * (prev_n + frac * (n - prev_n))
        prev_n, prev_p = n, p
    return math.inf


def table_rows(runs: int = 2000) -> list[str]:
    rows = ["| between-cell CV | max repeats/arm | spending | A/A family-wise error | effect | power | mean cells "
            "(sequential) | cells of a fixed design of equal power | saving |",
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|"]
    for cv, reps, effect in ((0.03, 8, 0.97), (0.10, 8, 0.90), (0.10, 24, 0.90), (0.10, 24, 0.93),
                             (0.40, 24, 0.70)):
        for spending in ("obrien-fleming", "pocock"):
            aa = simulate(Design(cv, reps, 2, 1.0, spending), runs)
            d = Design(cv, reps, 2, effect, spending)
            ab = simulate(d, runs, seed=2)
            fixed = equal_power_cells(d, min(ab["power"], 0.99), runs)  # at 100 % "equal power" means nothing
            saving = 1 - ab["cells"] / fixed if math.isfinite(fixed) else math.nan
            signed = [f"{100 * x:+.0f} %".replace("-", "−") for x in (effect - 1, saving)]
            rows.append(f"| {100 * cv:.0f} % | {reps} | {spending} | {100 * aa['any_rejection']:.1f} % | {signed[0]} | "
                        f"{100 * ab['power']:.0f} % | {ab['cells']:.1f} | {fixed:.1f} | {signed[1]} |")
    return rows


def write_table(path: Path) -> None:
    replace_between(path, BEGIN, END, table_rows())
    sim_rci.write_table(path)  # the repeated confidence intervals' coverage, the next table


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write-table":
        write_table(Path(sys.argv[2]))
    else:
        print("\n".join(table_rows()))
