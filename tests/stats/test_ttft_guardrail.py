"""A level where the load client's own share of TTFT p99 is too large (client.json ``ttft_client_bound``, from
kit.load's first-read lag): the TTFT verdict is withheld there, the other metrics keep theirs."""

from __future__ import annotations

import json
from pathlib import Path

from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.stats import summarize_bundle


def test_ttft_verdict_withheld_where_the_client_shares_ttft(tmp_path: Path) -> None:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(ttft_factor=0.7, itl_factor=0.7)},
                      repeats=3, levels=(1, 4), requests=32)
    root = make_bundle(tmp_path / "b", spec)
    flagged = root / "cells" / "oea-r2" / "level-4" / "client.json"
    doc = json.loads(flagged.read_text())
    doc.update(ttft_client_bound=True, ttft_client_bound_reasons=["process 0: first-chunk read lag p99 12 ms"])
    flagged.write_text(json.dumps(doc))
    summary = summarize_bundle(root)
    status = {(c["level"], c["metric"]): c["status"] for c in summary["comparisons"]}  # type: ignore[index]
    assert status[(4, "ttft_mean_ms")] == "ttft_client_bound"
    assert status[(1, "ttft_mean_ms")] == "significant"  # the other level keeps its TTFT verdict
    assert status[(4, "tpot_mean_ms")] == "significant"  # and the level its other verdicts
