"""`kit compare A B` over two synthetic bundles: figures read from typed summaries, setup from the other files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.compare import compare_bundles, comparison_json, render_comparison
from kit.errors import BundleError
from kit.stats import summarize_bundle


def _bundle(root: Path, spec: BundleSpec, version: str) -> Path:
    make_bundle(root, spec)
    (root / "run.json").write_text(json.dumps({"kit_version": version, "flags": {"allow_unsigned": False}}))
    (root / "summary.json").write_text(json.dumps(summarize_bundle(root)))
    return root


def test_compare_two_runs(tmp_path: Path) -> None:
    a = _bundle(tmp_path / "a", BundleSpec(repeats=2, levels=(1, 4), requests=16, seed=1), "0.1.0")
    b = _bundle(tmp_path / "b", BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.5)},
                                           repeats=2, levels=(1, 4), requests=16, seed=2, server_metrics=True),
                "0.2.0")
    result = compare_bundles(a, b)
    setup = {s["what"]: s for s in result["setup"]}
    assert setup["kit version"]["same"] is False and setup["manifest.yaml sha256"]["same"] is True
    rows = {(r["arm"], r["level"], r["figure"]): r for r in result["figures"]}
    assert len({(arm, level) for arm, level, _ in rows}) == 4
    itl = rows[("oea", 4, "ITL p50 ms")]
    assert itl["a"] is not None and itl["b"] is not None and itl["ratio_b_over_a"] == pytest.approx(itl["b"] / itl["a"])
    experts = rows[("oea", 1, "experts/step")]
    assert experts["a"] is None and experts["b"] is not None and experts["ratio_b_over_a"] is None
    lines = render_comparison(result)
    assert lines[0] == f"A: {a}"
    assert any(line.split() == ["kit", "version", "DIFFERS", "A=0.1.0", "B=0.2.0"] for line in lines), lines
    json.dumps(comparison_json(result))  # what `kit compare --json` prints


def test_a_summary_that_is_not_one_is_a_bundle_error(tmp_path: Path) -> None:
    a = _bundle(tmp_path / "a", BundleSpec(repeats=1, levels=(1,), requests=8), "0.1.0")
    (a / "summary.json").write_text(json.dumps({"arm_levels": "nope"}))
    with pytest.raises(BundleError, match=r"summary.json: field experiment: Field required"):
        compare_bundles(a, a)
