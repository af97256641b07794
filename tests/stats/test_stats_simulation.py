"""Simulated experiments (tests/stats/sim.py, kit's synthetic-bundle factory not involved) through the comparison.

Fast tier: 200 experiments per scenario; ``slow``: 1000, with a one-sided 95 % upper bound on the false-alarm
rate. Measured rates are printed (pytest -s) and quoted in docs/statistics.md.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps
from sim import SimArm, SimDesign, simulate

from kit.stats import compare_levels

ARMS = ["a", "b"]


def run(d: SimDesign, n: int, seed: int, primary: str = "tpot_mean_ms") -> dict[str, Any]:
    """Rates over n experiments: family-wise false alarms (primary / secondary), verdicts, withheld."""
    rng = np.random.default_rng(seed)
    fw_primary = fw_secondary = any_verdict = withheld = latency_sig = 0
    for _ in range(n):
        comps, _, _ = compare_levels(simulate(rng, d), ARMS, "a", primary=primary, correction="holm",
                                     confidence=0.95)
        tested = [c for c in comps if c["tested"]]
        fw_primary += any(c["significant"] for c in tested if c["role"] == "primary")
        fw_secondary += any(c["significant"] for c in tested if c["role"] == "secondary")
        any_verdict += any(c["status"] in ("significant", "not_significant") for c in tested)
        withheld += all(c["status"] not in ("significant", "not_significant") for c in tested)
        latency_sig += any(c["significant"] for c in tested if c["unit"] == "ms")
    return {"n": n, "primary": fw_primary / n, "secondary": fw_secondary / n, "verdicts": any_verdict / n,
            "withheld": withheld / n, "latency_significant": latency_sig / n, "alarms": fw_primary}


def upper95(alarms: int, n: int) -> float:
    return float(sps.beta.ppf(0.95, alarms + 1, n - alarms))


def aa(cells: int) -> SimDesign:
    return SimDesign(arms={"a": SimArm(cells=cells), "b": SimArm(cells=cells)})


UNEQUAL = SimDesign(arms={"a": SimArm(cells=3, cell_sd=0.01), "b": SimArm(cells=2, cell_sd=0.06)})
UNEQUAL_53 = SimDesign(arms={"a": SimArm(cells=5, cell_sd=0.01), "b": SimArm(cells=3, cell_sd=0.05)})


@pytest.mark.parametrize("cells", [2, 3, 5])
def test_aa_family_wise_false_alarms(cells: int) -> None:
    r = run(aa(cells), 200, seed=cells)
    print(f"\nA/A {cells} cells per arm: {r}")
    assert r["primary"] <= 0.05 and r["secondary"] <= 0.05, r


@pytest.mark.parametrize("design", [UNEQUAL, UNEQUAL_53], ids=["3v2", "5v3"])
def test_unequal_cells_and_variances(design: SimDesign) -> None:
    """Unequal counts, the smaller arm 5-6x noisier (a failed cell): pooled df K_a+K_b-2 and even Welch–Satterthwaite
    are liberal here (7.8 % / 6.8 %), Hsu's df min(K_a, K_b) - 1 holds the level."""
    r = run(design, 200, seed=11)
    print(f"\nA/A unequal cells and variance {[(a.cells, a.cell_sd) for a in design.arms.values()]}: {r}")
    assert r["primary"] <= 0.05 and r["secondary"] <= 0.05, r


def test_single_cell_gives_no_verdict() -> None:
    r = run(aa(1), 200, seed=12)
    print(f"\nA/A 1 cell per arm: {r}")
    assert r["verdicts"] == 0 and r["withheld"] == 1, r


def test_one_arm_with_timeouts_gets_no_latency_call() -> None:
    """A/A where 15 % of one arm's requests time out (the slowest): withheld, never a significant latency call."""
    d = SimDesign(arms={"a": SimArm(), "b": SimArm(timeout_frac=0.15)}, requests=32)
    r = run(d, 200, seed=13)
    print(f"\nA/A, 15 % timeouts in one arm: {r}")
    assert r["latency_significant"] == 0, r


def test_real_effect_is_found() -> None:
    """A 10 % TPOT effect at 4 levels, 3 % between-cell CV, 5 cells per arm: found in >= 75 % of experiments."""
    d = SimDesign(arms={"a": SimArm(cells=5), "b": SimArm(cells=5, tpot_factor=0.9)}, levels=(1, 4, 16, 64))
    r = run(d, 100, seed=14)
    print(f"\n10 % TPOT effect, 5 cells: {r}")
    assert r["primary"] >= 0.75, r


@pytest.mark.slow
@pytest.mark.parametrize("design", [aa(2), aa(3), aa(5), UNEQUAL, UNEQUAL_53, replace(aa(3), requests=64)],
                         ids=["aa2", "aa3", "aa5", "unequal3v2", "unequal5v3", "aa3-64req"])
def test_aa_family_wise_false_alarms_full(design: SimDesign) -> None:
    r = run(design, 1000, seed=21)
    bound = upper95(r["alarms"], r["n"])
    print(f"\n{design.arms}: {r}, one-sided 95 % upper bound {bound:.3f}")
    assert r["primary"] <= 0.05 and bound <= 0.07, (r, bound)
