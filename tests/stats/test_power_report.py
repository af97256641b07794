"""report.md and the verdict lines say what the design could detect at the observed variation, and what a
'no significant difference' interval rules out; checked against the variation computed here from the cell files."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.report import render_report, verdict_lines
from kit.stats import summarize_bundle
from kit.stats.power import cv_from_sd, mde, percent_up


def _log_tpot_cells(root: Path, level: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for cell in json.loads((root / "plan.json").read_text())["cells"]:
        if json.loads((root / "cells" / cell["id"] / "cell.json").read_text())["status"] != "ok":
            continue
        recs = [json.loads(x) for x in (root / "cells" / cell["id"] / f"level-{level}" / "records.jsonl").open()]
        tpot = [(r["e2e_ns"] - r["ttft_ns"]) / (r["usage_completion_tokens"] - 1) for r in recs if r["status"] == 200]
        out.setdefault(cell["arm"], []).append(math.log(float(np.mean(tpot))))
    return out


def test_report_states_the_detectable_effect_with_unequal_cells(tmp_path: Path) -> None:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.97)}, repeats=3, levels=(1, 4),
                      requests=24, tokens=8, seed=31, failed={"oea-r2": "server died"},
                      analysis="  method: welch\n")  # Welch's Hsu df; the blocked test's power: test_analysis.py
    root = make_bundle(tmp_path / "b", spec)
    summary = summarize_bundle(root)
    render_report(root, summary)
    md = (root / "report.md").read_text(encoding="utf-8")
    section = md.split("## What this design could detect")[1].split("## Excluded cells")[0]
    assert "α/m = 0.05/2 = 0.025 (Holm's first step)" in section  # m = 2 levels x 1 arm
    for level in (1, 4):
        logs = _log_tpot_cells(root, level)
        a, b = np.array(logs["oea"]), np.array(logs["baseline"])
        se2 = a.var(ddof=1) / a.size + b.var(ddof=1) / b.size
        sd = math.sqrt(se2 / (1 / a.size + 1 / b.size))
        d = mde(sd, 2, 3, 0.025)  # Hsu's df = 1
        assert d is not None
        line = next(x for x in section.splitlines() if x.startswith(f"- c={level}, oea vs baseline (2 vs 3 cells)"))
        got = re.search(r"could detect \+([\d.]+) % / −[\d.]+ % at 80 % power \(observed between-cell CV ([\d.]+) %",
                        line)
        assert got is not None, line
        assert float(got[1]) == pytest.approx(percent_up(d), abs=0.051)
        assert float(got[2]) == pytest.approx(100 * cv_from_sd(sd), abs=0.051)


def test_no_significant_difference_says_what_it_rules_out(tmp_path: Path) -> None:
    spec = BundleSpec(repeats=3, levels=(1, 4), requests=24, tokens=8, seed=32)  # A/A
    root = make_bundle(tmp_path / "aa", spec)
    summary = summarize_bundle(root)
    render_report(root, summary)
    md = (root / "report.md").read_text(encoding="utf-8")
    prim = [c for c in summary["comparisons"] if c["role"] == "primary"]
    assert {c["status"] for c in prim} == {"not_significant"}
    for c in prim:
        lo, hi = (f"{x:+.1f}".replace("-", "−") for x in c["change_pct_ci"])
        row = next(x for x in md.splitlines() if x.startswith(f"| primary | oea | {c['level']} |"))
        assert row.endswith(f"— the interval rules out only changes beyond {lo} % and {hi} % |")
        assert f"which is not 'no effect': the interval rules out only changes beyond {lo} % and {hi} % (97.5 % " \
               "interval)" in md  # nothing rejected: Holm's intervals stay at its first step, alpha/2
    lines = verdict_lines(summary)
    notes = [x for x in lines if x.startswith("      this design could detect")]
    assert len(notes) == 2 and all("rules out only changes beyond" in x for x in notes)


def test_too_few_cells_has_nothing_to_read(tmp_path: Path) -> None:
    spec = BundleSpec(repeats=2, levels=(1,), requests=12, tokens=6, seed=33, failed={"oea-r1": "server died"})
    root = make_bundle(tmp_path / "few", spec)
    summary = summarize_bundle(root)
    render_report(root, summary)
    md = (root / "report.md").read_text(encoding="utf-8")
    assert "- c=1, oea vs baseline (1 vs 2 cells): no interval, nothing to read the variation from (too few cells)" \
        in md
    assert not any(x.startswith("      ") for x in verdict_lines(summary))
