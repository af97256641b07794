"""The futility interval of a sequential look is the pre-registered comparison's (analysis.method, analysis.statistic),
the one the looks test, not Welch on cell means: checked against scipy's paired t on the log geometric means of the
cells (``scipy.stats.ttest_rel(...).confidence_interval``), on cells with a large block effect where Welch on cell
means gives a very different interval (the old code's)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats as sps

from kit.manifest import Manifest, load_manifest
from kit.stats import CellSample
from kit.stats.ab import LevelSamples
from kit.stats.looks import _futility_ci
from kit.stats.metrics import N_COLS

ROOT = Path(__file__).resolve().parents[2]


def sequential_manifest(repeats: int = 8, **analysis: Any) -> Manifest:
    """The demo manifest made sequential with futility, ``analysis`` overriding its analysis section."""
    d = load_manifest(ROOT / "experiments" / "demo.yaml").manifest.model_dump(exclude_unset=True)
    d["design"] = {"repeats": repeats, "order": "abba", "seed": 0,
                   "sequential": {"spending": "obrien-fleming", "futility": {"margin_pct": 10, "confidence": 0.9}}}
    d["analysis"] = {**d.get("analysis", {}), **analysis}
    return Manifest.model_validate(d)


def _cell(cid: str, repeat: int, tpot: np.ndarray) -> CellSample:
    m = np.zeros((tpot.size, N_COLS))
    m[:, 0], m[:, 1], m[:, 2], m[:, 3], m[:, 6], m[:, 7] = tpot, tpot * 33, tpot, 1.0, 33.0, 1.0
    return CellSample(cid, m, 1.0, repeat=repeat)


def test_futility_interval_is_the_blocked_geomean_comparison() -> None:
    rng = np.random.default_rng(3)
    repeats = 8
    block = rng.normal(0, 0.4, repeats)  # a block (repeat) effect shared by both arms: Welch sees it, pairs do not
    cells: dict[str, list[CellSample]] = {"baseline": [], "oea": []}
    for arm, effect in (("baseline", 0.0), ("oea", -0.05)):
        for r in range(repeats):
            tpot = np.exp(3 + block[r] + effect + rng.normal(0, 0.02) + rng.normal(0, 0.8, 48))  # heavy tails
            cells[arm].append(_cell(f"{arm}-r{r + 1}", r + 1, tpot))
    ls = LevelSamples(1, cells, {}, {})
    m = sequential_manifest(repeats, method="blocked", statistic="geomean")
    got = _futility_ci(ls, "oea", "baseline", m)
    log_g = {a: np.array([np.log(c.matrix[:, 2]).mean() for c in v]) for a, v in cells.items()}
    ci = sps.ttest_rel(log_g["oea"], log_g["baseline"]).confidence_interval(0.9)
    want = [100 * math.expm1(ci.low), 100 * math.expm1(ci.high)]
    assert got == pytest.approx(want, rel=1e-9)
    # the old code's interval (Welch on the cells' means) is far off here: the test above fails on it
    means = {a: np.log([c.matrix[:, 2].mean() for c in v]) for a, v in cells.items()}
    old = sps.ttest_ind(means["oea"], means["baseline"], equal_var=False).confidence_interval(0.9)
    assert 100 * math.expm1(old.high) - 100 * math.expm1(old.low) > 3 * (want[1] - want[0])
    # Welch pre-registered: scipy's Welch interval on the same statistic
    welch_ci = _futility_ci(ls, "oea", "baseline", sequential_manifest(repeats, method="welch", statistic="geomean"))
    ref = sps.ttest_ind(log_g["oea"], log_g["baseline"], equal_var=False).confidence_interval(0.9)
    assert welch_ci == pytest.approx([100 * math.expm1(ref.low), 100 * math.expm1(ref.high)], rel=1e-9)
