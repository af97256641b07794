"""Check a `kit plan --pilot --json` plan by simulation, with a generator and a test that are not kit's.

For each planned level: cells' log statistics drawn from numpy normals with the plan's SD (its 80 % upper bound,
and the pilot's own estimate taken as the truth), the arm shifted by the target effect (up and down), Welch's
test from scipy at the plan's per-comparison alpha (Holm's first step). Prints the power kit promised and what
the simulation gives, for the planned repeats and for the repeats kit says are needed.

    python -m kit plan --json --pilot BUNDLE --target-effect 20% MANIFEST > plan.json
    python benchmarks/plan_check.py plan.json [--runs 20000] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
from scipy import stats


def power(n: int, sd: float, effect: float, alpha: float, runs: int, rng: np.random.Generator) -> float:
    a = rng.normal(0.0, sd, size=(runs, n))
    b = rng.normal(effect, sd, size=(runs, n))
    p = stats.ttest_ind(b, a, axis=1, equal_var=False).pvalue
    return float(np.mean(p < alpha))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    pw = json.loads(a.plan.read_text())["power"]
    rng = np.random.default_rng(a.seed)
    alpha = pw["tail"]  # two-sided, per comparison: Holm's first step (alpha / family)
    effect = math.log1p(pw["target_effect"])
    print(f"plan: {a.plan}; pilot {pw['pilot']}; target ±{pw['target_effect']:.0%} at {pw['target_power']:.0%} "
          f"power, two-sided alpha {alpha:.4g} per comparison; {a.runs} simulated experiments a cell")
    for lv in pw["levels"]:
        for label, sd in (("80 % bound", lv["log_sd"]), ("pilot's estimate", lv["estimate_sd"])):
            for n, promised in ((pw["repeats"], lv["power_at_target"] if label == "80 % bound" else
                                 lv["power_at_estimate"]), (lv["repeats_needed"], None)):
                up = power(n, sd, effect, alpha, a.runs, rng)
                down = power(n, sd, -effect, alpha, a.runs, rng)
                kit = "-" if promised is None else f"{promised:.1%}"
                if promised is None and label == "80 % bound":
                    kit = f">= {pw['target_power']:.0%}"
                print(f"  c={lv['concurrency']} log SD {sd:.4f} ({label}), {n} repeats/arm: kit {kit}; "
                      f"simulated {up:.1%} (+) / {down:.1%} (-) ± {math.sqrt(up * (1 - up) / a.runs):.1%}")


if __name__ == "__main__":
    main()
