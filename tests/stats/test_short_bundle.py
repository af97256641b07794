"""Short responses through a whole bundle: records.jsonl files -> ``summarize_bundle`` -> counts and statuses.

The bundle is the synthetic one of tests/support (the demo manifest asks for 32 output tokens); its records are
then cut the way a server that ends responses early would send them (fewer chunks, usage counting them), with
timed-out requests and records without usage mixed in, and the counts are checked one by one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.bundles import ArmModel, BundleSpec, cut_records, make_bundle

from kit.stats import summarize_bundle

ASKED = 32  # experiments/demo.yaml's load.output_tokens
SPEC = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel()}, repeats=2, levels=(4,), requests=24, seed=3)


def _rewrite(root: Path, cell: str, change: Any) -> None:
    path = root / "cells" / cell / "level-4" / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in change(recs)))


def _timeouts(k: int) -> Any:
    """The first k requests time out after 5 chunks (no usage: the stream never ended)."""
    def change(recs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for r in recs[:k]:
            r.update(chunk_ns=r["chunk_ns"][:5], client_tokens=5, usage_completion_tokens=None,
                     error="timeout after 30 s", e2e_ns=r["chunk_ns"][4] + 30_000_000_000)
        return recs
    return change


def _cells(s: dict[str, Any]) -> dict[str, int]:
    return {c["id"]: c["levels"]["4"]["short_responses"] for c in s["cells"]}


def _primary(s: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in s["comparisons"] if c["role"] == "primary")


def test_one_arm_cut_short_is_counted_and_withheld_timeouts_are_not_short(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", SPEC)
    for cell in ("oea-r1", "oea-r2"):
        cut_records(root, cell, 4, 20)
    _rewrite(root, "baseline-r1", _timeouts(3))  # timed out, not short: censored rows, never counted as short
    _rewrite(root, "oea-r2", _timeouts(2))
    s = summarize_bundle(root)
    assert _cells(s) == {"baseline-r1": 0, "baseline-r2": 0, "oea-r1": 24, "oea-r2": 22}
    assert {a["arm"]: a["short_responses"] for a in s["arm_levels"]} == {"baseline": 0, "oea": 46}
    p = _primary(s)
    assert (p["lengths"]["arm_short"], p["lengths"]["arm_ok"]) == (46, 46)
    assert (p["lengths"]["baseline_short"], p["lengths"]["baseline_ok"]) == (0, 45)
    assert p["status"] == "output_lengths_differ" and p["significant"] is False
    assert "short 46/46 vs 0/45" in p["verdict"]


def test_both_arms_cut_alike_keep_their_verdict_and_say_so(tmp_path: Path) -> None:
    root = make_bundle(tmp_path / "b", SPEC)
    for cell in ("baseline-r1", "baseline-r2", "oea-r1", "oea-r2"):
        cut_records(root, cell, 4, 20)
    s = summarize_bundle(root)
    p = _primary(s)
    assert p["lengths"]["p"] == 1.0
    assert p["status"] in ("significant", "not_significant")
    assert "short 48/48 vs 48/48 (Fisher p=1)" in p["verdict"]


def test_without_the_servers_usage_nothing_is_called_short(tmp_path: Path) -> None:
    # a server that streams several tokens per event and reports no usage: the client's count is no token count
    root = make_bundle(tmp_path / "b", SPEC)
    for cell in ("oea-r1", "oea-r2"):
        cut_records(root, cell, 4, 20, usage=False)
    s = summarize_bundle(root)
    assert set(_cells(s).values()) == {0}
    assert _primary(s)["status"] in ("significant", "not_significant")
