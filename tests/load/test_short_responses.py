"""Responses shorter than asked, from a real streaming server through kit's real load driver to the verdict.

benchmarks/sse_server.py with ``--max-tokens-cap`` answers complete responses of fewer tokens than each request
asks for (its usage counts what it sent, as an engine's does when its context limit or an end-of-sequence it
does not suppress ends a response). Such responses are ok requests, not errors, and the client's count agrees
with the server's; but their TPOT and throughput cover less work, so an arm that returns them at another rate
than the baseline gets no verdict (summary schema 3).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from scipy import stats as sps

from kit.load import run_level
from kit.stats.ab import compare_levels
from kit.stats.figures import cell_level_figures
from kit.stats.requests import reduce_records
from kit.stats.summary import CellInfo, summarize_level

from ._support import FakeServer, make_spec, read_records

ASKED = 16
CAP = 10

pytestmark = pytest.mark.slow  # four real load levels (a Locust process each): ~10 s


def _cell(srv: FakeServer, arm: str, repeat: int, tmp: Path) -> tuple[CellInfo, object, object]:
    spec = make_spec(srv.base_url, concurrency=3, requests=6, warmup_requests=1, output_tokens=ASKED,
                     tags={"arm": arm, "repeat": repeat, "level": 3})
    res = run_level(spec, tmp / f"{arm}-r{repeat}")
    recs = read_records(res.records_path)
    lr = reduce_records(recs)
    figs = cell_level_figures(lr, json.loads(res.client_path.read_text()), None, requested=ASKED)
    return CellInfo(f"{arm}-r{repeat}", arm, repeat, 0, "ok", None), lr, figs


def test_short_responses_are_counted_and_withhold_the_verdict(sse_server: Callable[..., FakeServer],
                                                               tmp_path: Path) -> None:
    full = sse_server(5.0, 2.0)
    capped = sse_server(5.0, 2.0, "--max-tokens-cap", str(CAP))
    measured = [_cell(full, "A", r, tmp_path) for r in (1, 2)] + [_cell(capped, "B", r, tmp_path) for r in (1, 2)]

    for info, lr, figs in measured:
        recs = read_records(tmp_path / info.id / "records.jsonl")
        want = ASKED if info.arm == "A" else CAP
        # complete responses: status 200, no error, the client's count equal to the server's usage
        assert all(r["status"] == 200 and r["error"] is None for r in recs)
        assert all(r["client_tokens"] == r["usage_completion_tokens"] == want for r in recs)
        assert figs["tokens_mismatch"] == 0 and figs["errors"] == 0  # type: ignore[index]
        assert figs["short_responses"] == (0 if info.arm == "A" else len(recs))  # type: ignore[index]
        assert lr.short(CAP) == 0  # type: ignore[attr-defined]

    level = summarize_level({"concurrency": 3, "requests": 6, "warmup": 1}, ["A", "B"], 0.95, measured)  # type: ignore[arg-type]
    assert [a["short_responses"] for a in level.arm_levels] == [0, 12]
    comparisons, _, _ = compare_levels([level.samples], ["A", "B"], "A", primary="tpot_mean_ms",
                                       correction="holm", confidence=0.95)
    primary = next(c for c in comparisons if c["role"] == "primary")
    assert primary["lengths"] is not None
    assert (primary["lengths"]["arm_short"], primary["lengths"]["arm_ok"]) == (12, 12)
    assert (primary["lengths"]["baseline_short"], primary["lengths"]["baseline_ok"]) == (0, 12)
    assert primary["lengths"]["p"] == pytest.approx(sps.fisher_exact([[12, 0], [0, 12]]).pvalue)
    assert primary["status"] == "output_lengths_differ" and not primary["significant"]
    assert primary["verdict"].startswith("the arms returned fewer output tokens than asked at different rates")
    assert "short 12/12 vs 0/12" in primary["verdict"]
    # every tested metric of B is withheld for the same reason; nothing else is
    assert {c["status"] for c in comparisons if c["tested"]} == {"output_lengths_differ"}
