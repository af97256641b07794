"""`kit plan --pilot` on the kept H200 bundle (benchmarks/results/h200-powered-2026-12-01/bundle.tar.gz: baseline vs
OEA, 8 repeats per arm in ABBA order, c=1 and 4; the A/A of 2026-12-01 kept only its summary, no records to read)
promises a power for a 10 % change; an independent simulation of that design at the pilot's SD (numpy draws, kit's
blocked test applied) must land within 10 points of it. docs/statistics.md, "Plans from a pilot", has the numbers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from kit.manifest import Manifest, load_manifest
from kit.plan import power_plan
from kit.stats import CellSample
from kit.stats.ab import run_test
from kit.stats.metrics import N_COLS, TESTED

ROOT = Path(__file__).resolve().parents[2]
PILOT = ROOT / "benchmarks" / "results" / "h200-powered-2026-12-01" / "bundle.tar.gz"
TPOT = next(m for m in TESTED if m.key == "tpot_mean_ms")
SIMS = 2000


def _cell(arm: str, r: int, log_tpot: float) -> CellSample:
    m = np.zeros((1, N_COLS))
    m[0, 2], m[0, 3], m[0, 7] = math.exp(log_tpot), 1.0, 1.0
    return CellSample(f"{arm}-r{r}", m, 1.0, repeat=r)


def simulated_power(k: int, sd: float, effect: float, tail: float, seed: int) -> float:
    """ABBA blocks of 2 repeats, a large random effect per block (the machine drifting), normal cell noise ``sd``."""
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(SIMS):
        block = rng.normal(0, 0.3, size=(k + 1) // 2)
        base = [_cell("baseline", r, 3.0 + block[(r - 1) // 2] + rng.normal(0, sd)) for r in range(1, k + 1)]
        arm = [_cell("oea", r, 3.0 + effect + block[(r - 1) // 2] + rng.normal(0, sd)) for r in range(1, k + 1)]
        res = run_test(arm, base, TPOT, method="blocked")
        hits += res is not None and res.p <= tail
    return hits / SIMS


def _manifest() -> Manifest:
    return load_manifest(ROOT / "experiments" / "transformers-h200-powered.yaml").manifest


@pytest.mark.slow
def test_the_h200_pilots_plan_holds_in_simulation(tmp_path: Path) -> None:
    m = _manifest()
    assert m.analysis.method == "blocked" and m.design.repeats == 8
    pp = power_plan(m, pilot=PILOT, target_effect=0.10)
    effect = math.log1p(0.10)
    for lv in pp.levels:
        assert lv.estimate_sd is not None and lv.power_at_estimate is not None and lv.power_at_target is not None
        sim = simulated_power(pp.repeats, lv.estimate_sd, effect, pp.tail, seed=lv.concurrency)
        assert abs(sim - lv.power_at_estimate) <= 0.10, (lv.concurrency, sim, lv.power_at_estimate)
        assert lv.power_at_target <= lv.power_at_estimate  # the bound promises less, never more
        # the repeats it asks for reach 80 % at the bound's SD
        assert lv.repeats_needed is not None
        assert simulated_power(lv.repeats_needed, lv.log_sd, effect, pp.tail, seed=7) >= 0.80 - 0.05
    assert pp.options and min(o.minutes or 1e9 for o in pp.options) < 1e9


def test_a_pilot_archive_is_known_by_its_bytes_not_its_name(tmp_path: Path) -> None:
    """`kit plan --pilot run.tar` said "no such directory" for a `kit archive` file not named .tar.gz (2026-12-07)."""
    from kit.plan import pilot_levels

    renamed = tmp_path / "run.tar"
    renamed.write_bytes(PILOT.read_bytes())
    assert pilot_levels(renamed, TPOT) == pilot_levels(PILOT, TPOT)
