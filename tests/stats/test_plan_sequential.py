"""`kit plan` of a sequential manifest against an independent simulation written here: its own generator (log cell
statistics with a random effect per repeat shared by both arms, lognormal between-cell noise at the planned CV),
scipy's paired and Welch t tests, a run that stops at the first look where the p crosses the boundary (kit's
spending boundaries: the design under test) or futility holds, or at the last look the budget allows. The power
and the expected looks kit's plan promises must match it within the simulations' error."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from kit.manifest import Manifest, load_manifest
from kit.plan import power_lines, power_plan
from kit.stats.sequential import nominal_levels

ROOT = Path(__file__).resolve().parents[2]
RUNS = 2000


def manifest(repeats: int, method: str, futility: dict[str, float] | None = None, **seq: Any) -> Manifest:
    d = load_manifest(ROOT / "experiments" / "demo.yaml").manifest.model_dump(exclude_unset=True)
    d["load"] = {**{k: v for k, v in d["load"].items() if not k.endswith("_per_level")}, "levels": [1]}
    d["design"] = {"repeats": repeats, "order": "abba", "seed": 0,
                   "sequential": {"spending": "obrien-fleming", **seq, **({"futility": futility} if futility else {})}}
    d["analysis"] = {**d.get("analysis", {}), "method": method}
    return Manifest.model_validate(d)


def independent(repeats: int, looks: int, cv: float, effect: float, method: str, spending: str = "obrien-fleming",
                futility: tuple[float, float] | None = None, seed: int = 0) -> tuple[float, float]:
    """(power, mean looks) of one comparison at alpha 0.05."""
    rng = np.random.default_rng(seed)
    sd = math.sqrt(math.log(1 + cv**2))
    block = rng.normal(0, 0.3, (RUNS, repeats))  # a repeat's shared effect: cancels in the paired test only
    if method == "welch":
        block[:] = 0.0
    base = 3.0 + block + rng.normal(0, sd, (RUNS, repeats))
    arm = 3.0 + math.log1p(effect) + block + rng.normal(0, sd, (RUNS, repeats))
    most = repeats // 2
    nominal = nominal_levels([(k + 1) / most for k in range(looks)], 0.05, spending, final=True)
    stop = np.full(RUNS, float(looks))
    rejected = np.zeros(RUNS, dtype=bool)
    done = np.zeros(RUNS, dtype=bool)
    for k in range(looks):
        n = 2 * (k + 1)
        if method == "blocked":
            r = sps.ttest_rel(arm[:, :n], base[:, :n], axis=1)
        else:
            r = sps.ttest_ind(arm[:, :n], base[:, :n], axis=1, equal_var=False)
        reject = r.pvalue <= nominal[k]
        stop_now = reject.copy()
        if futility is not None:
            ci = r.confidence_interval(futility[1])
            stop_now |= (ci.low > -math.log1p(futility[0])) & (ci.high < math.log1p(futility[0]))
        now = ~done & (stop_now | (k == looks - 1))
        rejected[now] = reject[now]
        stop[now] = k + 1
        done |= now
    return float(rejected.mean()), float(stop.mean())


@pytest.mark.parametrize(("method", "repeats", "effect"), [("blocked", 12, 0.10), ("welch", 12, 0.15)])
def test_power_and_expected_looks_match_an_independent_simulation(method: str, repeats: int, effect: float) -> None:
    pp = power_plan(manifest(repeats, method), cv=0.10, target_effect=effect)
    sp = pp.sequential
    assert sp is not None and sp.looks == sp.most_looks == repeats // 2
    want_power, want_looks = independent(repeats, sp.looks, 0.10, effect, method, seed=1)
    se = math.sqrt(0.25 / RUNS) + math.sqrt(0.25 / sp.runs)
    assert sp.power[0] == pytest.approx(want_power, abs=3 * se), (sp, want_power)
    assert sp.looks_effect == pytest.approx(want_looks, abs=0.15), (sp, want_looks)
    _, null_looks = independent(repeats, sp.looks, 0.10, 0.0, method, seed=3)
    assert sp.looks_null == pytest.approx(null_looks, abs=0.1) and sp.looks_null > sp.looks - 0.2  # no futility
    assert 0.2 < want_power < 0.95  # a power that can tell a wrong plan


def test_futility_and_a_time_budget_shorten_the_run_as_simulated() -> None:
    m = manifest(12, "blocked", futility={"margin_pct": 10, "confidence": 0.9}, max_minutes=1000)
    sp = power_plan(m, cv=0.10, target_effect=0.10).sequential
    assert sp is not None and sp.futility
    p_null, looks_null = independent(12, sp.looks, 0.10, 0.0, "blocked", futility=(0.10, 0.9), seed=2)
    assert sp.looks_null == pytest.approx(looks_null, abs=0.15) and sp.looks_null < sp.looks
    assert p_null <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / RUNS)
    # a budget that allows only part of the blocks: the plan's last look is the budget's
    short = manifest(12, "blocked", max_minutes=1e-3)
    sq = power_plan(short, cv=0.10, target_effect=0.10).sequential
    assert sq is not None and sq.looks == 1 and sq.looks_effect == 1.0
    json.dumps(power_plan(m, cv=0.10).as_dict(), allow_nan=False)  # `kit plan --json`: no NaN or inf
    text = "\n".join(power_lines(power_plan(m, cv=0.10, target_effect=0.10)))
    assert "sequential design (obrien-fleming" in text and "expected to the stop: under that effect" in text
