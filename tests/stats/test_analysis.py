"""The pre-registered analysis choices (analysis.method, analysis.statistic, analysis.slo) against things kit did
not write: the A/A false-alarm rate from an independent generator (tests/stats/sim_analysis.py, numpy only),
the blocked test against scipy's paired t (and its level under unequal variances), the cell statistics
against scipy/numpy, goodput against plain json + arithmetic on records.jsonl, and schema-4 summaries still
recomputed byte for byte."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps
from sim_analysis import Scenario, rejection_rate
from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.report import render_report
from kit.stats import CellSample, ab, summarize_bundle
from kit.stats.ab import LevelSamples
from kit.stats.cellstat import CellRule, cell_value
from kit.stats.metrics import N_COLS, TESTED
from kit.stats.model import blocked
from kit.stats.pilot import pilot_level, sd_at_requests, within_variance
from kit.stats.versions import as_schema

DATA = Path(__file__).parent / "data"
TPOT, TTFT, ITL = (next(m for m in TESTED if m.key == k) for k in ("tpot_mean_ms", "ttft_mean_ms", "itl_mean_ms"))
SIMS = 400
# 5 % plus 2.5 standard errors of a rate of 5 % over SIMS experiments: a real excess beyond it fails
LIMIT = 0.05 + 2.5 * math.sqrt(0.05 * 0.95 / SIMS)


@pytest.mark.parametrize("method", ["welch", "blocked"])
def test_aa_false_alarms_of_each_method_at_most_5_percent(method: str) -> None:
    for s in (Scenario(repeats=4), Scenario(repeats=8, drift="ar1", drift_size=0.1), Scenario(heavy_cells=True)):
        assert rejection_rate(s, method, CellRule(), SIMS, 0.05, seed=11) <= LIMIT, s


@pytest.mark.parametrize("statistic", ["mean", "geomean", "trimmed", "p50", "p90", "p99"])
def test_aa_false_alarms_of_each_cell_statistic_at_most_5_percent(statistic: str) -> None:
    s = Scenario(repeats=4, cell_sd=0.05, req_sigma=1.0, requests=64)  # heavy-tailed requests
    assert rejection_rate(s, "blocked", CellRule(statistic=statistic), SIMS, 0.05, seed=12) <= LIMIT


def test_blocked_is_scipys_paired_t_on_the_block_means() -> None:
    """Two cells of each arm per block (blocks of two repeats, or a repeated cell): the paired t of the block means,
    by scipy; a block missing one arm drops out."""
    rng = np.random.default_rng(5)
    blocks = 5
    y = rng.normal(size=(2, blocks, 2)) + np.array([0.3, 0.0])[:, None, None] + rng.normal(size=blocks)[None, :, None]
    arm_b = [b for b in range(blocks) for _ in range(2)]
    keep = [i for i, b in enumerate(arm_b) if b != 4]  # the arm's cells of block 4 failed
    r = blocked(y[0].ravel()[keep], [arm_b[i] for i in keep], y[1].ravel(), arm_b)
    ref = sps.ttest_rel(y[0, :4].mean(axis=1), y[1, :4].mean(axis=1))
    assert r is not None and r.df == 3 and (r.k_arm, r.k_base) == (8, 8)
    assert r.p == pytest.approx(ref.pvalue, rel=1e-9)
    assert r.estimate == pytest.approx(float((y[0, :4] - y[1, :4]).mean()), rel=1e-12)


def test_blocked_with_one_cell_per_block_is_scipys_paired_t() -> None:
    rng = np.random.default_rng(6)
    a, b = rng.normal(size=7), rng.normal(size=7) + 0.5
    r = blocked(a, list(range(7)), b, list(range(7)))
    ref = sps.ttest_rel(a, b)
    assert r is not None and r.p == pytest.approx(ref.pvalue, rel=1e-9) and r.df == 6


def _cell(values: np.ndarray, gaps: np.ndarray | None = None) -> CellSample:
    m = np.zeros((values.size, N_COLS))
    m[:, 0], m[:, 1], m[:, 2], m[:, 3], m[:, 7] = values, values * 5, values, 1.0, 1.0
    return CellSample("a-r1", m, 1.0, repeat=1, gaps=gaps)


def test_cell_statistics_against_scipy_and_numpy() -> None:
    rng = np.random.default_rng(7)
    x = rng.lognormal(3.0, 1.0, size=101)
    cell = _cell(x, gaps=x[:50])
    assert cell_value(cell, TPOT, CellRule("geomean")) == pytest.approx(sps.gmean(x), rel=1e-12)
    xs = np.sort(x)
    assert cell_value(cell, TPOT, CellRule("trimmed", trim=0.1)) == pytest.approx(xs[10:91].mean(), rel=1e-12)
    for st, q in (("p50", 50), ("p90", 90), ("p99", 99)):
        assert cell_value(cell, TTFT, CellRule(st)) == pytest.approx(np.percentile(x, q), rel=1e-12)
    assert cell_value(cell, ITL, CellRule("p90")) == pytest.approx(np.percentile(x[:50], 90), rel=1e-12)
    assert cell_value(cell, TPOT, CellRule("mean")) == pytest.approx(x.mean(), rel=1e-12)


SLO = "  slo: {ttft_ms: 40, tpot_ms: 5.5, e2e_ms: 400}\n"


def _goodput_from_records(root: Path, bounds: dict[str, float]) -> dict[tuple[str, int], tuple[int, int, float]]:
    """vLLM's definition, from the files: an ok request is good when every bound >= its value (TPOT of a one-token
    response: 0); goodput = good / the level's wall time (first send to last end)."""
    out = {}
    for rec_file in sorted(root.glob("cells/*/level-*/records.jsonl")):
        cell, level = rec_file.parent.parent.name, int(rec_file.parent.name.split("-")[1])
        recs = [json.loads(line) for line in rec_file.read_text().splitlines() if line.strip()]
        good = 0
        for r in recs:
            if r["status"] != 200 or r["error"] is not None or r["ttft_ns"] is None:
                continue
            tokens = r["usage_completion_tokens"]
            ttft, e2e = r["ttft_ns"] / 1e6, r["e2e_ns"] / 1e6
            tpot = (e2e - ttft) / (tokens - 1) if tokens > 1 else 0.0
            good += ttft <= bounds["ttft_ms"] and tpot <= bounds["tpot_ms"] and e2e <= bounds["e2e_ms"]
        wall = max(r["wall_start"] + r["e2e_ns"] / 1e9 for r in recs) - min(r["wall_start"] for r in recs)
        out[(cell, level)] = (good, len(recs), wall)
    return out


def test_goodput_in_summary_equals_an_independent_count_of_records(tmp_path: Path) -> None:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.9)}, repeats=2, levels=(1, 4),
                      requests=24, tokens=8, errors_per_level=2, seed=41, analysis=SLO)
    root = make_bundle(tmp_path / "b", spec)
    s = summarize_bundle(root)
    mine = _goodput_from_records(root, {"ttft_ms": 40, "tpot_ms": 5.5, "e2e_ms": 400})
    assert s["analysis"]["slo"] == {"ttft_ms": 40, "tpot_ms": 5.5, "e2e_ms": 400}
    assert len(s["goodput"]) == len(mine) == 8
    for g in s["goodput"]:
        good, total, wall = mine[(g["cell"], g["level"])]
        assert 0 < good < total  # the bounds cut: a test that can fail
        assert (g["good"], g["requests"]) == (good, total)
        assert g["goodput_req_s"] == pytest.approx(good / wall, rel=1e-5)
        assert g["slo_attainment"] == pytest.approx(good / total, rel=1e-5)
    keys = {(c["metric"], c["role"]) for c in s["comparisons"]}
    assert ("goodput_req_s", "secondary") in keys and ("slo_attainment", "secondary") in keys
    render_report(root, s)
    md = (root / "report.md").read_text(encoding="utf-8")
    assert "SLO: TTFT ≤ 40 ms, TPOT ≤ 5.5 ms, E2E ≤ 400 ms" in md
    for arm in ("baseline", "oea"):
        good = sum(v[0] for (cell, lv), v in mine.items() if cell.startswith(arm + "-") and lv == 4)
        total = sum(v[1] for (cell, lv), v in mine.items() if cell.startswith(arm + "-") and lv == 4)
        assert f"| {arm} | 4 | 2 | {good} / {total} |" in md


def test_goodput_can_be_the_primary_and_the_statistic_is_named(tmp_path: Path) -> None:
    spec = BundleSpec(repeats=2, levels=(1,), requests=16, tokens=8, seed=42,
                      analysis=SLO + "  statistic: p90\n")
    text_root = make_bundle(tmp_path / "b", spec)
    manifest = (text_root / "manifest.yaml").read_text().replace("primary: tpot_mean_ms", "primary: goodput_req_s")
    (text_root / "manifest.yaml").write_text(manifest)
    s = summarize_bundle(text_root)
    prim = [c for c in s["comparisons"] if c["role"] == "primary"]
    assert [c["metric"] for c in prim] == ["goodput_req_s"]
    assert s["analysis"]["cell_statistic"] == "p90"
    tpot = next(c for c in s["comparisons"] if c["metric"] == "tpot_mean_ms")
    assert tpot["label"] == "TPOT p90" and "TPOT p90" in tpot["verdict"]


def test_a_schema_4_summary_is_still_recomputed_byte_for_byte(tmp_path: Path) -> None:
    from test_stats_golden import SPEC

    root = make_bundle(tmp_path / "rich", SPEC)
    old = json.loads((DATA / "golden.schema4.summary.json").read_text(encoding="utf-8"))
    assert old["schema_version"] == 4
    assert as_schema(summarize_bundle(root, legacy=True), 4) == old
    assert as_schema(summarize_bundle(root), 4) != old  # the default analysis (blocked) says other numbers


def test_the_default_block_is_one_repeat() -> None:
    assert ab.BLOCK_REPEATS == 1  # pairs: the adjacent A B (or B A) of one repeat (docs/statistics.md)


def test_the_pilot_splits_the_variance_into_requests_and_cells() -> None:
    """An independent generator: cells with a between-cell SD 0.05 on the log scale and 64 lognormal(σ 0.5)
    requests each; the requests' variance of the log cell mean is about (e^σ² − 1) / n (delta method)."""
    rng = np.random.default_rng(8)
    arms = {arm: [CellSample(f"{arm}-r{r}", _cell(20 * np.exp(0.05 * rng.normal() + 0.5 * rng.normal(size=64))).matrix,
                             1.0, repeat=r) for r in range(1, 9)] for arm in ("a", "b")}
    got = pilot_level(LevelSamples(1, arms, {}, {}), TPOT, method="blocked")
    assert got is not None and got.df == 16 - 2 - 8 + 1 and got.requests == 64  # cells - arms - blocks + 1
    w = within_variance([c for v in arms.values() for c in v], TPOT)
    assert w == pytest.approx(math.expm1(0.25), rel=0.2)
    assert got.within == pytest.approx(min(w, got.sd**2 * 64))  # never more than all of the variance the test sees
    # a plan for 4x the requests: the requests' share shrinks 4x, the cells' stays
    sd4 = sd_at_requests(got, got.sd, 256)
    assert sd4**2 == pytest.approx(got.sd**2 - got.within * (1 / 64 - 1 / 256), rel=1e-9)
    assert sd_at_requests(got, got.sd, 64) == pytest.approx(got.sd, rel=1e-12)
