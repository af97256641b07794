"""The comparison model (Welch on log cells) and the two-stage bootstrap on in-memory cells."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from support.bundles import ArmModel, BundleSpec, _level_records

from kit import stats
from kit.stats import CellSample, LevelSamples, bootstrap_arm, compare_levels, reduce_records

LEVEL = 16


def arm_cells(rng: np.random.Generator, model: ArmModel, k: int, cell_sd: float, requests: int = 64) -> list[CellSample]:
    spec = BundleSpec(requests=requests, tokens=32)
    out = []
    for i in range(k):
        mult = float(rng.lognormal(0.0, cell_sd))
        lr = reduce_records(_level_records(rng, "x", i, LEVEL, model, mult, spec, 1000.0))
        out.append(CellSample(f"c{i}", lr.matrix, stats.throughput(lr)[1] or 0.0))
    return out


def level(rng: np.random.Generator, itl: float, k: int = 3, cell_sd: float = 0.05) -> LevelSamples:
    return LevelSamples(LEVEL, {"baseline": arm_cells(rng, ArmModel(), k, cell_sd),
                                "oea": arm_cells(rng, ArmModel(itl_factor=itl), k, cell_sd)},
                        {"baseline": False, "oea": False}, {})


def itl_comparison(ls: LevelSamples, confidence: float = 0.99) -> dict[str, Any]:
    comps, m, m2 = compare_levels([ls], ["baseline", "oea"], "baseline", primary="itl_mean_ms", correction="holm",
                                  confidence=confidence)
    assert (m, m2) == (1, len(stats.TESTED) - 1)
    return next(c for c in comps if c["metric"] == "itl_mean_ms")


def test_interval_covers_a_known_effect() -> None:
    """True ITL ratio 0.8 (per-cell multipliers have the same law in both arms): the intervals must cover it."""
    rng = np.random.default_rng(42)
    covered, widths = 0, []
    runs = 30
    for _ in range(runs):
        c = itl_comparison(level(rng, 0.8))
        lo, hi = c["ratio_ci"]
        covered += lo <= 0.8 <= hi
        widths.append(hi - lo)
    assert covered >= runs - 1
    assert float(np.median(widths)) < 0.4  # covers because it is honest, not because it is useless


def test_hierarchical_interval_grows_with_between_cell_noise() -> None:
    rng = np.random.default_rng(7)
    quiet = itl_comparison(level(rng, 1.0, cell_sd=0.0))
    noisy = itl_comparison(level(rng, 1.0, cell_sd=0.15))

    def width(c: dict[str, Any]) -> float:
        lo, hi = c["ratio_ci"]
        return float(hi - lo)

    assert width(noisy) > 2 * width(quiet)


def test_one_cell_gives_no_verdict() -> None:
    rng = np.random.default_rng(3)
    c = itl_comparison(level(rng, 0.8, k=1))
    assert c["status"] == "too_few_cells" and c["df"] is None and c["ratio_ci"] is None
    assert str(c["verdict"]).startswith("too few cells: no verdict")


def test_two_stage_resampling_draws_cells() -> None:
    """With cells of very different speed, the replicates spread like the cells, not like the requests."""
    rng = np.random.default_rng(5)
    cells = arm_cells(rng, ArmModel(), 3, cell_sd=0.3)
    hier = bootstrap_arm(cells, stats.TESTED, 2000, np.random.default_rng(0), hierarchical=True)
    flat = bootstrap_arm(cells, stats.TESTED, 2000, np.random.default_rng(0), hierarchical=False)
    j = stats.TESTED.index(next(m for m in stats.TESTED if m.key == "itl_mean_ms"))
    assert hier.replicates[:, j].std() > 3 * flat.replicates[:, j].std()
    assert hier.observed[j] == pytest.approx(flat.observed[j])


def test_bootstrap_is_deterministic_for_a_seed() -> None:
    rng = np.random.default_rng(11)
    cells = arm_cells(rng, ArmModel(), 3, cell_sd=0.05)
    a = bootstrap_arm(cells, stats.TESTED, 500, np.random.default_rng(9), hierarchical=True)
    b = bootstrap_arm(cells, stats.TESTED, 500, np.random.default_rng(9), hierarchical=True)
    assert np.array_equal(a.replicates, b.replicates)


def test_gather_batches_do_not_change_totals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Splitting the request gathers into small batches gives the same per-replicate sums shape and means."""
    rng = np.random.default_rng(13)
    cells = arm_cells(rng, ArmModel(), 2, cell_sd=0.05)
    monkeypatch.setattr(stats.bootstrap, "MAX_GATHER", 100)
    small = bootstrap_arm(cells, stats.TESTED, 300, np.random.default_rng(1), hierarchical=True)
    assert small.replicates.shape == (300, len(stats.TESTED))
    assert np.isfinite(small.replicates).all()


def test_an_interval_beyond_e700_is_not_shown_and_the_summary_still_computes() -> None:
    """Two noisy cells an arm judged at 99.9999 %: Welch's df near 1 put the bound beyond e^700, and math.exp's
    OverflowError left a real A/A run at 99.9 % without summary, report or verdicts (CI of the stop, transformers
    on the CPU). The interval is None (no ratio excluded on that side), the verdict says nothing significant."""
    rng = np.random.default_rng(3)
    c = itl_comparison(level(rng, 1.0, k=2, cell_sd=0.5), confidence=0.999999)
    assert c["ratio_ci"] is None and c["change_pct_ci"] is None and c["diff_ci"] is None, c["ratio_ci"]
    assert not c["significant"] and "ratio" in c


def test_no_detectable_effect_from_an_unbounded_sd() -> None:
    """A real CPU A/A at 99.9 % with two cells an arm gave an interval so wide its SD came out infinite: the
    report's power section then died in brentq (the run ended with a summary and no report.md)."""
    from kit.stats.power import mde

    assert mde(float("inf"), 2, 2, 0.001) is None and mde(float("nan"), 2, 2, 0.001) is None
    assert mde(0.1, 2, 2, 0.05) is not None
