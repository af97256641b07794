"""The looks of a sequential design on a bundle of simulated records (tests/support's factory, the demo manifest:
design.sequential, at most six repeats): the loop's ``Looks`` takes one per block and stops once every primary
comparison is decided; the summary's primary verdicts are the last look's; `kit verify`'s recomputation
(``check_looks``) holds for the looks as written and names a look that was changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.bundle import Bundle
from kit.bundle.looks import check_looks
from kit.experiment.looks import Looks, needed_cells
from kit.manifest import load_manifest
from kit.plan import make_plan
from kit.report import render_report
from kit.stats import summary_of
from tests.support.bundles import ArmModel, BundleSpec, make_bundle


def test_looks_stop_when_decided_and_recompute(tmp_path: Path) -> None:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.6)}, repeats=6, levels=(1, 4),
                      requests=24, cell_sd=0.02, cell_level_sd=0.005)
    root = make_bundle(tmp_path / "b", spec)
    m = load_manifest(root / "manifest.yaml").manifest
    assert m.design.sequential is not None and m.design.repeats == 6
    plan = make_plan(m)
    looks = Looks(m, plan, Bundle(root, "test"))
    taken = looks.take_due()
    assert [d["look"] for d in taken] == [1, 2] and looks.stopped  # -40 % at 2 % CV: decided at the second look
    first, second = taken
    assert first["stop"] is None and [c["decision"] for c in first["comparisons"]] == ["continue", "continue"]
    assert second["stop"] == "decided" and {c["decision"] for c in second["comparisons"]} == {"efficacy"}
    assert len(second["cells"]) == 8 and all(c["fraction"] == pytest.approx(8 / 12) for c in second["comparisons"])
    assert all(c["nominal_p"] < c["family_alpha"] for c in second["comparisons"])  # stricter than a fixed test
    assert len(needed_cells(m, plan, Bundle(root, "test"))) == 8
    assert check_looks(root) == ("2 sequential look(s) recomputed from the records OK, stopped: decided", [])
    summary = summary_of(root)
    seq = summary["sequential"]  # type: ignore[typeddict-item]
    assert seq["stop"] == "decided" and seq["looks"] == 2 and seq["cells_used"] == 8
    primary = [c for c in summary["comparisons"] if c["role"] == "primary"]
    assert all(c["significant"] and "(sequential: rejected at look 2; the interval is the repeated" in c["verdict"]
               for c in primary)
    # the reported interval is the last look's repeated confidence interval, at its marginal level 1 - nominal_p
    last = {(c["arm"], c["level"]): c for c in second["comparisons"]}
    for c in primary:
        d = last[(c["arm"], c["level"])]
        assert c["ratio_ci"] == d["repeated_ci"] and c["interval_confidence"] == pytest.approx(1 - d["nominal_p"])
        assert d["repeated_ci"][0] < c["ratio"] < d["repeated_ci"][1] < 1  # rejected: the interval excludes 1
        assert d["repeated_confidence"] == pytest.approx(1 - d["family_alpha"])
    assert [c["repeated_ci"] for c in seq["comparisons"]] == [c["repeated_ci"] for c in second["comparisons"]]
    render_report(root, summary)
    report = (root / "report.md").read_text()
    assert "**repeated confidence intervals**" in report and "repeated CI (level over the looks)" in report
    doc = json.loads((root / "looks" / "001.json").read_text())
    doc["comparisons"][1]["p_test"] = 0.5
    (root / "looks" / "001.json").write_text(json.dumps(doc))
    _, problems = check_looks(root)
    assert len(problems) == 1 and "looks/001.json" in problems[0] and "comparisons.1.p_test" in problems[0]
