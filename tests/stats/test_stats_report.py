"""report.md (verdicts first), deterministic PNG plots, and the CLI's verdict lines."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.report import render_report, verdict_lines
from kit.stats import summarize_bundle


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.8, experts_factor=0.6)},
                      cell_sd=0.02, seed=21, server_metrics=True, failed={"baseline-r3": "readiness timed out"},
                      client_bound=frozenset({("oea-r1", 64)}))
    root = make_bundle(tmp_path_factory.mktemp("report") / "bundle", spec)
    return root, summarize_bundle(root)


def test_report_starts_with_the_verdict_table(bundle: tuple[Path, dict[str, Any]]) -> None:
    root, s = bundle
    paths = render_report(root, s)
    md = (root / "report.md").read_text(encoding="utf-8")
    assert paths[0] == root / "report.md"
    lines = [line for line in md.splitlines() if line.strip()]
    assert lines[0].startswith("# demo-levels: oea vs baseline")
    assert lines[1] == "## Verdicts"
    assert lines[2].startswith("| role | arm | concurrency | metric |")
    verdicts = md.split("## Excluded cells")[0]
    table = [line for line in verdicts.splitlines() if "| oea |" in line]
    assert len(table) == 20 + 4  # tested rows + descriptive unique-experts rows
    # baseline-r3 failed: 3 vs 2 cells, Hsu's df = 1, so the TPOT effect is not called here
    assert any("TPOT mean −" in row and row.startswith("| primary |") for row in table)
    assert not any("**" in row for row in table if row.startswith("| secondary |"))  # secondary: never bold
    assert "CLIENT-BOUND" in md and "c=64" in md
    assert "`baseline-r3` (failed): readiness timed out" in md
    assert "## Method" in md and "(docs/statistics.md)" in md
    assert md.index("## Verdicts") < md.index("## Concurrency 1")


@pytest.mark.slow  # seconds of subprocesses or plots: the slow tier (unit tier budget, issue 21)
def test_plots_exist_and_are_byte_identical(bundle: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    root, s = bundle
    first = render_report(root, s)
    pngs = [p for p in first if p.suffix == ".png"]
    assert {p.name for p in pngs} == {"throughput.png", "latency.png", "experts.png", "pareto.png", "latency_cdf.png",
                                      "drift.png"}  # no telemetry in the toy bundle: no per-cell time series
    other = tmp_path / "again"
    shutil.copytree(root, other)
    shutil.rmtree(other / "plots")
    second = render_report(other, s)
    for a, b in zip(first, second, strict=True):
        assert a.read_bytes() == b.read_bytes(), a.name
        if a.suffix == ".png":
            assert a.read_bytes().startswith(b"\x89PNG") and b"matplotlib" not in a.read_bytes()


def test_no_experts_plot_without_server_metrics(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", BundleSpec(seed=22, levels=(1, 4)))
    paths = render_report(root, summarize_bundle(root))
    assert {p.name for p in paths} == {"report.md", "throughput.png", "latency.png", "pareto.png", "latency_cdf.png",
                                       "drift.png"}
    assert "unique experts" not in (root / "report.md").read_text(encoding="utf-8").split("## Concurrency 1")[1]


def test_verdict_lines(bundle: tuple[Path, dict[str, Any]]) -> None:
    _, s = bundle
    lines = verdict_lines(s)
    assert lines[0].startswith("verdicts vs baseline: primary tpot_mean_ms, 4 tests (holm, family-wise 95 %)")
    assert sum(1 for line in lines if line.startswith("  oea c=")) == 20
    assert sum(1 for line in lines if line.endswith("(secondary)")) == 16
    assert any("c=64" in line and "client-bound: no verdict" in line for line in lines)
    assert any(line.startswith("  WARNING: c=64 is client-bound") for line in lines)
    assert any("excluded: cell baseline-r3" in line for line in lines)
