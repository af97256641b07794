"""summary.json and report.md of a synthetic bundle, byte for byte as kit made them before kit.stats became a
package (kit verify recomputes summaries byte for byte, so the numbers and texts must never drift by accident).

Regenerated for issue 10 (Welch on log cells, primary family with Holm, guardrails, summary schema 2), for summary
schema 3 (short responses and the output-length guardrail) and for schema 4 (usage_flagged and the usage guardrail):
fields added, no number or text changed; for schema 5 (analysis.method's default, the blocked test, changed every
interval and p; the schema-4 summary is kept as golden.schema4.summary.json and still recomputed by
tests/stats/test_analysis.py); if a deliberate change of the statistics or the report changes them,
regenerate them in the same commit and say so (``python tests/stats/test_stats_golden.py --regenerate``).
"""

from __future__ import annotations

import json
from pathlib import Path

from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.report import render_report, verdict_lines
from kit.stats import summarize_bundle

DATA = Path(__file__).parent / "data"
SPEC = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(ttft_factor=0.8, experts_factor=0.7),
                        "x": ArmModel(itl_factor=1.3)},
                  repeats=3, levels=(1, 8), requests=20, server_metrics=True, errors_per_level=2,
                  failed={"x-r2": "server died"}, client_bound=frozenset({("oea-r1", 8)}))


def test_summary_and_report_are_byte_identical_to_the_golden_ones(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "rich", SPEC)
    summary = summarize_bundle(root)
    golden = (DATA / "golden.summary.json").read_text(encoding="utf-8")
    assert json.dumps(summary, indent=1, sort_keys=True) == golden
    render_report(root, summary)
    assert (root / "report.md").read_text(encoding="utf-8") == (DATA / "golden.report.md").read_text(encoding="utf-8")
    assert verdict_lines(summary)[0].startswith("verdicts vs baseline: ")


if __name__ == "__main__":
    import sys
    import tempfile

    if "--regenerate" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            root = make_bundle(Path(tmp) / "rich", SPEC)
            doc = summarize_bundle(root)
            (DATA / "golden.summary.json").write_text(json.dumps(doc, indent=1, sort_keys=True), encoding="utf-8")
            render_report(root, doc)
            (DATA / "golden.report.md").write_bytes((root / "report.md").read_bytes())
