"""Usage counts a server cannot have meant, through a whole bundle: records.jsonl -> ``summarize_bundle`` -> the
usage guardrail (summary schema 4) -> report.md.

The bundle is the synthetic one of tests/support (the demo manifest asks for 32 output tokens, primary TPOT mean);
its records are then rewritten the way a hostile or broken server would report usage. Both arms share one latency
model, so without the guardrail the arm that over-reports its tokens by 10 % would read about 10 % faster.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.files.bounds import max_record_bytes
from kit.files.summary import Summary
from kit.report import render_markdown
from kit.stats import summarize_bundle
from kit.stats.requests import output_tokens, reduce_records, usage_flagged
from kit.stats.verdict import WITHHELD
from kit.stats.versions import as_schema

ASKED = 32  # experiments/demo.yaml's load.output_tokens
SPEC = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel()}, repeats=2, levels=(4,), requests=24, seed=5)


def _rewrite(root: Path, cell: str, usage: Any, raw: bool = False) -> list[dict[str, Any]]:
    """Set every ok record's usage.completion_tokens of ``cell`` (``raw``: a JSON literal written as is)."""
    path = root / "cells" / cell / "level-4" / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    lines = []
    for r in recs:
        if r["status"] == 200 and r["error"] is None:
            r["usage_completion_tokens"] = "@USAGE@" if raw else usage(r)
        lines.append(json.dumps(r).replace('"@USAGE@"', str(usage)) if raw else json.dumps(r))
    path.write_text("".join(line + "\n" for line in lines))
    return recs


def _tested(s: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in s["comparisons"] if c["tested"]]


def test_an_arm_that_over_reports_its_tokens_gets_no_verdict(tmp_path: Path) -> None:
    clean = summarize_bundle(make_bundle(tmp_path / "clean", SPEC))
    root = make_bundle(tmp_path / "b", SPEC)
    for cell in ("oea-r1", "oea-r2"):
        _rewrite(root, cell, lambda r: math.ceil(r["client_tokens"] * 1.1))  # 36 for the 32 tokens asked and sent
    s = summarize_bundle(root)
    assert {a["arm"]: a["usage_flagged"] for a in s["arm_levels"]} == {"baseline": 0, "oea": 48}
    assert {c["id"]: c["levels"]["4"]["usage_flagged"] for c in s["cells"]} == \
        {"baseline-r1": 0, "baseline-r2": 0, "oea-r1": 24, "oea-r2": 24}
    primary = next(c for c in s["comparisons"] if c["role"] == "primary")
    assert primary["metric"] == "tpot_mean_ms"
    assert primary["status"] == "usage_flagged" and primary["significant"] is False
    assert primary["usage"] == {"arm_flagged": 48, "arm_ok": 48, "baseline_flagged": 0, "baseline_ok": 48,
                                "test": "any_flagged"}
    assert primary["verdict"].startswith(WITHHELD["usage_flagged"].removesuffix(": no verdict"))
    assert "usage flagged 48/48 vs 0/48" in primary["verdict"]
    assert {c["status"] for c in _tested(s)} == {"usage_flagged"}  # every tested metric of the arm
    # timing took the client's count: the figures are those of the clean bundle, not 10 % better
    for key in ("tpot_ms", "ttft_ms", "e2e_ms"):
        assert [a[key] for a in s["arm_levels"]] == [a[key] for a in clean["arm_levels"]]
    assert [a["output_tokens"] for a in s["arm_levels"]] == [48 * ASKED, 48 * ASKED]
    clean_primary = next(c for c in clean["comparisons"] if c["role"] == "primary")
    assert primary["ratio"] == clean_primary["ratio"]
    # the report shows it: the level table counts them, a note says why, the verdict row is marked
    md = render_markdown(Summary.model_validate(s))
    assert "| oea | 2 | 48 (48 usage flagged) |" in md
    assert "48 ok response(s) at this level carried a usage count the server cannot have meant" in md
    assert f"⚠ {primary['verdict']}" in md
    # schema 3 had no usage guardrail and took the server's count: it cannot say what this kit says
    assert as_schema(s, 3) is None and as_schema(s, 2) is None
    assert as_schema(clean, 3) is not None and as_schema(clean, 2) is not None


@pytest.mark.parametrize("literal", ["-5", "1e30", "9" * 4000, '"32"', "true", "31.5", "NaN"])
def test_implausible_usage_is_flagged_not_a_crash(tmp_path: Path, literal: str) -> None:
    # what a hostile server could have made a driver of an earlier kit write, or what a tampered record holds
    root = make_bundle(tmp_path / "b", SPEC)
    recs = _rewrite(root, "baseline-r1", literal, raw=True)
    s = summarize_bundle(root)
    flagged = sum(1 for r in recs if r["status"] == 200 and r["error"] is None)
    assert {c["id"]: c["levels"]["4"]["usage_flagged"] for c in s["cells"]}["baseline-r1"] == flagged > 0
    assert {c["status"] for c in _tested(s)} == {"usage_flagged"}  # the baseline is flagged: every arm withheld
    cell = next(c for c in s["cells"] if c["id"] == "baseline-r1")["levels"]["4"]
    assert cell["output_tokens"] == flagged * ASKED  # the client's count
    assert 1e-3 < cell["tpot_ms"]["mean"] < 1e3
    json.dumps(s, allow_nan=False)  # a summary that serialises: no OverflowError, no NaN


def test_the_usage_check_per_record() -> None:
    base = {"status": 200, "error": None, "ttft_ns": 1, "chunk_ns": [1] * 16, "client_tokens": 16, "e2e_ns": 9}
    cases: list[tuple[object, int | None, bool, int]] = [
        (16, 16, False, 16),      # agrees
        (32, 32, False, 32),      # two tokens per event: more tokens than events is no contradiction
        (15, 16, True, 16),       # fewer tokens than content events: cannot be
        (17, 16, True, 16),       # more than max_tokens asked
        (17, None, False, 17),    # max_tokens unknown: only the lower bound holds
        (None, 16, False, 16),    # no usage: the client's count
        (-1, 16, True, 16), (2**31 + 1, None, True, 16), (10**30, None, True, 16), (16.0, 16, False, 16), (16.5, 16, True, 16),
        (True, 16, True, 16),
    ]
    for usage, requested, flagged, tokens in cases:
        rec = {**base, "usage_completion_tokens": usage}
        assert usage_flagged(rec, requested) is flagged, usage
        assert output_tokens(rec, requested) == tokens, usage
    # the driver's own flag counts even where the numbers alone would pass
    assert usage_flagged({**base, "usage_completion_tokens": None, "usage_flag": "implausible"}, 16)
    lr = reduce_records([{**base, "usage_completion_tokens": 17}, {**base, "usage_completion_tokens": 16}],
                        requested=16)
    assert lr.usage_flagged == 1 and lr.tokens_mismatch == 1 and list(lr.matrix[:, 6]) == [16.0, 16.0]


def test_a_record_line_longer_than_any_request_makes_is_not_parsed(tmp_path: Path) -> None:
    # an event flood recorded by a kit before the driver's bounds: one request with 200k chunk times (~2.6 MB)
    root = make_bundle(tmp_path / "b", SPEC)
    path = root / "cells" / "oea-r1" / "level-4" / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    flood = {**recs[0], "rid": "flood", "chunk_ns": list(range(10**9, 10**9 + 200_000)), "client_tokens": 200_000}
    assert len(json.dumps(flood)) > max_record_bytes(ASKED)
    with path.open("a") as f:
        f.write(json.dumps(flood) + "\n" + json.dumps(recs[1]) + "\n")  # and a normal record after it
    cell = next(c for c in summarize_bundle(root)["cells"] if c["id"] == "oea-r1")["levels"]["4"]
    assert cell["unparsable_lines"] == 1 and cell["requests"] == len(recs) + 1
