"""summarize_bundle on synthetic bundles written as real files."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from support.bundles import LEVELS, ArmModel, BundleSpec, make_bundle

from kit.stats import SCHEMA_VERSION, summarize_bundle

METRICS = {"throughput_tok_s", "ttft_mean_ms", "tpot_mean_ms", "itl_mean_ms", "e2e_mean_ms"}


def comparisons(summary: dict[str, Any], metric: str) -> list[dict[str, Any]]:
    return [c for c in summary["comparisons"] if c["metric"] == metric]


@pytest.fixture(scope="module")
def effect(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """oea decodes 20 % faster (ITL x 0.8); TTFT unchanged; 3 repeats per arm, 2 % between-repeat noise."""
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.8, experts_factor=0.6)},
                      cell_sd=0.02, seed=3, server_metrics=True, errors_per_level=1)
    root = make_bundle(tmp_path_factory.mktemp("effect") / "bundle", spec)
    return root, summarize_bundle(root)


def test_real_tpot_effect_is_detected_in_the_right_direction(effect: tuple[Path, dict[str, Any]]) -> None:
    _, s = effect
    tpot = comparisons(s, "tpot_mean_ms")
    assert [c["level"] for c in tpot] == list(LEVELS)
    for c in tpot:
        assert c["status"] == "significant", c["verdict"]
        assert c["verdict"].startswith("oea faster: TPOT mean −"), c["verdict"]
        assert c["role"] == "primary" and " ms [" in c["verdict"] and "failed " in c["verdict"]
        lo, hi = c["ratio_ci"]
        assert lo < c["ratio"] < hi < 1.0
        assert 0.72 < c["ratio"] < 0.88
        assert c["diff"] < 0 and c["diff_ci"][1] < 0


def test_unchanged_metric_is_not_called(effect: tuple[Path, dict[str, Any]]) -> None:
    _, s = effect
    assert all(c["status"] == "not_significant" for c in comparisons(s, "ttft_mean_ms"))


def test_slower_arm_is_called_slower(tmp_path: Path) -> None:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=1.25)}, cell_sd=0.02, seed=4,
                      levels=(4, 16))
    s = summarize_bundle(make_bundle(tmp_path / "b", spec))
    for c in comparisons(s, "tpot_mean_ms"):
        assert c["verdict"].startswith("oea slower: TPOT mean +"), c["verdict"]
    for c in comparisons(s, "throughput_tok_s"):
        assert not c["verdict"].startswith("oea faster"), c["verdict"]


def test_summary_structure(effect: tuple[Path, dict[str, Any]]) -> None:
    _, s = effect
    assert s["schema_version"] == SCHEMA_VERSION == 5
    assert s["arms"] == ["baseline", "oea"] and s["baseline"] == "baseline"
    a = s["analysis"]
    assert a["primary"] == "tpot_mean_ms" and a["correction"] == "holm"
    assert a["family_size"] == len(LEVELS) == 4  # primary: levels x non-baseline arms
    assert a["secondary_family_size"] == len(LEVELS) * (len(METRICS) - 1) == 16
    assert a["adjusted_confidence"] == pytest.approx(1 - 0.05 / 4)
    assert a["seed"] == 7 and a["resamples"] == 2000
    assert {c["metric"] for c in s["comparisons"] if c["tested"]} == METRICS
    assert [lv["concurrency"] for lv in s["levels"]] == list(LEVELS)
    arm16 = next(x for x in s["arm_levels"] if x["arm"] == "oea" and x["level"] == 16)
    assert arm16["cells"] == 3 and arm16["ok"] == 3 * 64 and arm16["errors"] == 3
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(arm16[key]) >= {"p50", "p90", "p99", "mean", "p50_ci"}
    assert arm16["between_cells"]["throughput_tok_s"]["cv_pct"] is not None
    assert arm16["server"]["unique_experts_per_step"] > 0
    cell = next(c for c in s["cells"] if c["id"] == "oea-r1")
    assert cell["levels"]["16"]["errors"] == 1 and cell["levels"]["16"]["error_reasons"][0]["count"] == 1
    experts = comparisons(s, "unique_experts_per_step")
    assert len(experts) == len(LEVELS) and all(not c["tested"] and c["ratio"] < 0.7 for c in experts)
    # strict JSON, and a JSON round trip changes nothing (what the bundle verifier compares)
    text = json.dumps(s, sort_keys=True, allow_nan=False)
    assert json.loads(text) == s


def test_recomputation_is_identical(effect: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    root, s = effect
    assert summarize_bundle(root) == s
    copy = tmp_path / "elsewhere"
    shutil.copytree(root, copy)
    assert json.dumps(summarize_bundle(copy), sort_keys=True) == json.dumps(s, sort_keys=True)


def test_client_bound_level_gets_no_clean_verdict(tmp_path: Path) -> None:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.7)}, cell_sd=0.02, seed=5,
                      client_bound=frozenset({("oea-r2", 64)}))
    s = summarize_bundle(make_bundle(tmp_path / "b", spec))
    lv = {x["concurrency"]: x for x in s["levels"]}
    assert lv[64]["client_bound"] and lv[64]["client_bound_cells"] == ["oea-r2"]
    assert not any(lv[c]["client_bound"] for c in (1, 4, 16))
    for c in s["comparisons"]:
        if c["level"] == 64:
            assert c["status"] == "client_bound"
            assert c["verdict"].startswith("client-bound: no verdict")
            assert "faster" not in c["verdict"] and "no significant" not in c["verdict"]
        elif c["metric"] == "tpot_mean_ms":
            assert c["status"] == "significant"


def test_failed_cells_are_reported_and_excluded(tmp_path: Path) -> None:
    spec = BundleSpec(seed=6, failed={"oea-r1": "server exited with code 137"})
    s = summarize_bundle(make_bundle(tmp_path / "b", spec))
    assert s["failed_cells"] == [{"id": "oea-r1", "arm": "oea", "repeat": 1, "status": "failed",
                                  "reason": "server exited with code 137"}]
    cell = next(c for c in s["cells"] if c["id"] == "oea-r1")
    assert cell["included"] is False and set(cell["levels"]) == {str(c) for c in LEVELS}
    for x in s["arm_levels"]:
        assert "oea-r1" not in x["cell_ids"]
        assert x["cells"] == (2 if x["arm"] == "oea" else 3)
    # the cells each test used: the blocked test (the default) pairs by repeat, so baseline-r1 has no partner
    assert all(c["cells"] == {"arm": 2, "baseline": 2} for c in s["comparisons"] if c["tested"])


def test_missing_cell_is_excluded(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", BundleSpec(seed=8))
    shutil.rmtree(root / "cells" / "baseline-r3")
    s = summarize_bundle(root)
    assert [f["id"] for f in s["failed_cells"]] == ["baseline-r3"]
    assert s["failed_cells"][0]["status"] == "missing"


def test_single_repeat_gives_no_verdict(tmp_path: Path) -> None:
    """One cell per arm cannot separate the arms from cell-to-cell noise: no verdict (it used to fall back to
    resampling requests, with 76 % family-wise false alarms in A/A)."""
    spec = BundleSpec(repeats=1, seed=9, levels=(4, 16), arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.8)})
    s = summarize_bundle(make_bundle(tmp_path / "b", spec))
    for c in s["comparisons"]:
        if c["tested"]:
            assert c["status"] == "too_few_cells" and c["significant"] is False
            assert c["verdict"].startswith("too few cells: no verdict"), c["verdict"]


def test_demo_sized_bundle_is_fast(effect: tuple[Path, dict[str, Any]]) -> None:
    root, _ = effect
    t0 = time.perf_counter()
    summarize_bundle(root)
    elapsed = time.perf_counter() - t0
    assert elapsed < 3.0, f"summarize_bundle took {elapsed:.2f} s on a demo-sized bundle"


def aa_runs(tmp_path: Path, seeds: range) -> list[list[str]]:
    """For each A/A experiment, the verdicts that claim a difference (empty: all clean)."""
    out = []
    for seed in seeds:
        spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel()}, cell_sd=0.03, seed=seed)
        root = make_bundle(tmp_path / f"aa{seed}", spec)
        s = summarize_bundle(root)
        assert s["analysis"]["family_size"] == 4
        out.append([f"c={c['level']} {c['metric']}: {c['verdict']}" for c in s["comparisons"]
                    if c["tested"] and not c["verdict"].startswith("no significant difference")])
        shutil.rmtree(root)
    return out


def test_aa_three_runs_find_nothing(tmp_path: Path) -> None:
    false_alarms = aa_runs(tmp_path, range(200, 203))
    assert sum(bool(x) for x in false_alarms) == 0, false_alarms


def test_aa_ten_runs_at_most_one_false_alarm(tmp_path: Path) -> None:
    false_alarms = aa_runs(tmp_path, range(100, 110))
    # two families at 5 % each: at most ~10 % of runs with any false alarm, so 3 or more of 10 has probability 7 %
    # (the blocked test, kit's default since schema 5, finds 2 here; its FWER: tests/stats/test_analysis.py)
    assert sum(not x for x in false_alarms) >= 8, false_alarms


def test_truncated_line_is_counted_not_fatal(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", BundleSpec(seed=10, levels=(4,)))
    with (root / "cells" / "oea-r2" / "level-4" / "records.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"arm":"oea","repeat":2,"chunk_ns":[1,2')
    s = summarize_bundle(root)
    cell = next(c for c in s["cells"] if c["id"] == "oea-r2")
    assert cell["levels"]["4"]["unparsable_lines"] == 1 and cell["levels"]["4"]["ok"] == 64


def test_malformed_bundle_raises_bundle_error(tmp_path: Path) -> None:
    from kit.errors import BundleError

    root = make_bundle(tmp_path / "b", BundleSpec(seed=11, levels=(4,)))
    with (root / "cells" / "oea-r2" / "level-4" / "records.jsonl").open("a", encoding="utf-8") as f:
        f.write('{"status":200,"error":null,"ttft_ns":5,"e2e_ns":null,"chunk_ns":[5]}\n')
    with pytest.raises(BundleError, match="malformed record"):
        summarize_bundle(root)
    (root / "plan.json").unlink()
    with pytest.raises(BundleError, match=r"plan\.json"):
        summarize_bundle(root)
