"""Per-request formulas, level figures, server metrics, distributions and verdict wording, on hand-made data."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from kit import stats
from kit.stats import TESTED, reduce_records, request_metrics, verdict_text

MS = 1_000_000


def rec(ttft_ms: float | None = 10, chunks_ms: list[float] | None = None, e2e_ms: float = 50, usage: int | None = 5,
        status: int = 200, error: str | None = None, wall: float = 100.0, client: int | None = None) -> dict[str, Any]:
    chunks = [10, 20, 25, 40, 49] if chunks_ms is None else chunks_ms
    return {"arm": "a", "repeat": 1, "level": 1, "rid": "x", "worker": 0, "t_start_ns": 0, "wall_start": wall,
            "ttft_ns": None if ttft_ms is None else int(ttft_ms * MS), "chunk_ns": [int(c * MS) for c in chunks],
            "e2e_ns": int(e2e_ms * MS), "usage_completion_tokens": usage, "usage_prompt_tokens": 3,
            "client_tokens": len(chunks) if client is None else client, "status": status, "error": error}


def test_request_metrics_formulas() -> None:
    m = request_metrics(rec())
    assert m is not None
    assert m.ttft_ms == pytest.approx(10)
    assert m.e2e_ms == pytest.approx(50)
    assert m.tpot_ms == pytest.approx((50 - 10) / (5 - 1))
    assert m.itl_ms == pytest.approx([10, 5, 15, 9])
    assert m.tokens == 5


def test_tokens_prefer_usage_and_fall_back_to_client() -> None:
    with_usage = request_metrics(rec(usage=9))
    assert with_usage is not None and with_usage.tpot_ms == pytest.approx(40 / 8)
    without = request_metrics(rec(usage=None))
    assert without is not None and without.tokens == 5 and without.tpot_ms == pytest.approx(10)


def test_tpot_needs_more_than_one_token() -> None:
    one = request_metrics(rec(chunks_ms=[10], usage=1, e2e_ms=12))
    assert one is not None and one.tpot_ms is None and one.itl_ms == []


@pytest.mark.parametrize("bad", [dict(status=500), dict(error="boom"), dict(ttft_ms=None, chunks_ms=[])])
def test_not_ok_requests(bad: dict[str, Any]) -> None:
    assert request_metrics(rec(**bad)) is None


def test_reduce_records_matches_per_request_definitions() -> None:
    recs = [rec(), rec(chunks_ms=[5, 7], ttft_ms=5, e2e_ms=8, usage=2, wall=100.5),
            rec(chunks_ms=[3], ttft_ms=3, e2e_ms=4, usage=1, wall=100.2),
            rec(status=503, error="http 503", ttft_ms=None, chunks_ms=[], wall=101.0, e2e_ms=1)]
    lr = reduce_records(recs)
    assert (lr.requests, lr.ok, lr.errors) == (4, 3, 1)
    assert lr.error_reasons == [{"reason": "http 503", "count": 1}]
    # the gap between requests is never an ITL: 4 gaps + 1 gap + 0 gaps
    assert sorted(lr.gaps.tolist()) == pytest.approx(sorted([10, 5, 15, 9, 2]))
    assert lr.tpot().tolist() == pytest.approx([10, 3])
    assert lr.output_tokens == 5 + 2 + 1
    # wall: earliest start (100.0) to latest start + e2e (101.0 + 0.001 s)
    assert lr.wall_s == pytest.approx(1.001)
    req_s, tok_s = stats.throughput(lr)
    assert req_s == pytest.approx(3 / 1.001) and tok_s == pytest.approx(8 / 1.001)
    figs = stats.latency_figures([lr])
    per_req = [request_metrics(r) for r in recs]
    ok = [m for m in per_req if m is not None]
    assert figs["ttft_ms"]["mean"] == pytest.approx(np.mean([m.ttft_ms for m in ok]))
    assert figs["e2e_ms"]["p50"] == pytest.approx(np.median([m.e2e_ms for m in ok]))
    assert figs["itl_ms"]["mean"] == pytest.approx(np.mean([g for m in ok for g in m.itl_ms]))
    assert figs["tpot_ms"]["n"] == 2


def test_token_mismatch_is_counted() -> None:
    lr = reduce_records([rec(usage=7), rec(usage=None)])
    assert lr.tokens_mismatch == 1


def test_server_figures_from_counter_deltas() -> None:
    before = {'kit_engine_unique_experts_sum{layer="0"}': 100.0, 'kit_engine_unique_experts_count{layer="0"}': 10.0,
              'kit_engine_unique_experts_sum{layer="1"}': 50.0, 'kit_engine_unique_experts_count{layer="1"}': 10.0,
              "kit_engine_step_seconds_sum": 1.0, "kit_engine_step_seconds_count": 10.0,
              "kit_engine_batch_size_sum": 20.0, "kit_engine_batch_size_count": 10.0}
    after = {'kit_engine_unique_experts_sum{layer="0"}': 300.0, 'kit_engine_unique_experts_count{layer="0"}': 30.0,
             'kit_engine_unique_experts_sum{layer="1"}': 250.0, 'kit_engine_unique_experts_count{layer="1"}': 30.0,
             "kit_engine_step_seconds_sum": 1.5, "kit_engine_step_seconds_count": 30.0,
             "kit_engine_batch_size_sum": 100.0, "kit_engine_batch_size_count": 30.0, "other_metric": 3.0}
    s = stats.server_figures({"before": before, "after": after})
    assert s is not None
    assert s["unique_experts_by_layer"] == {"0": pytest.approx(10.0), "1": pytest.approx(10.0)}
    assert s["unique_experts_per_step"] == pytest.approx(10.0)
    assert s["step_ms"] == pytest.approx(0.5 / 20 * 1000)
    assert s["decode_batch"] == pytest.approx(4.0)


@pytest.mark.parametrize("metrics", [None, {}, {"before": {}, "after": {}},
                                     {"before": {"sglang:foo": 1.0}, "after": {"sglang:foo": "x", "bar{": 2}},
                                     {"before": [], "after": None},
                                     {"before": None, "after": {"kit_engine_batch_size_sum": 5.0,
                                                                "kit_engine_batch_size_count": 1.0}}])
def test_server_figures_tolerate_unknown_servers(metrics: Any) -> None:
    assert stats.server_figures(metrics) is None


@pytest.mark.parametrize(("p", "df", "expected"), [(0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 4, 2.7764),
                                                   (0.995, 10, 3.1693), (0.975, 30, 2.0423), (0.999, 5, 5.8934)])
def test_t_quantile_matches_tables(p: float, df: int, expected: float) -> None:
    assert stats.t_quantile(p, df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_large_df_is_normal() -> None:
    assert stats.t_quantile(0.975, None) == pytest.approx(1.95996, abs=1e-4)
    assert stats.t_quantile(0.975, 5000) == pytest.approx(1.95996, abs=1e-4)


LATENCY = next(m for m in TESTED if m.key == "tpot_mean_ms")
THROUGHPUT = stats.THROUGHPUT


ERR = {"arm_failed": 0, "arm_requests": 200, "baseline_failed": 0, "baseline_requests": 200,
       "test": "fisher_exact_pooled", "p": None}


def verdict(metric: stats.Metric, status: str, ratio: float, ci: tuple[float, float] | None, base: float = 10.0,
            errors: Any = None) -> str:
    diff_ci = None if ci is None else (base * (ci[0] - 1), base * (ci[1] - 1))
    return verdict_text("oea", metric, status, ratio, ci, base * (ratio - 1), diff_ci, errors or ERR)


@pytest.mark.parametrize(("metric", "ratio", "ci", "status", "expected"), [
    (LATENCY, 0.877, (0.848, 0.909), "significant",
     "oea faster: TPOT mean −12.3 % (×0.877) [−15.2, −9.1], −1.23 ms [−1.52, −0.91]; failed 0/200 vs 0/200"),
    (LATENCY, 1.10, (1.05, 1.16), "significant",
     "oea slower: TPOT mean +10.0 % (×1.1) [+5.0, +16.0], +1.00 ms [+0.50, +1.60]; failed 0/200 vs 0/200"),
    (THROUGHPUT, 1.10, (1.05, 1.16), "significant",
     "oea faster: throughput +10.0 % (×1.1) [+5.0, +16.0], +1.00 tok/s [+0.50, +1.60]; failed 0/200 vs 0/200"),
    (THROUGHPUT, 0.877, (0.848, 0.909), "significant",
     "oea slower: throughput −12.3 % (×0.877) [−15.2, −9.1], −1.23 tok/s [−1.52, −0.91]; failed 0/200 vs 0/200"),
    (LATENCY, 0.988, (0.960, 1.019), "not_significant",
     "no significant difference: TPOT mean −1.2 % (×0.988) [−4.0, +1.9], −0.12 ms [−0.40, +0.19]; "
     "failed 0/200 vs 0/200"),
])
def test_verdict_direction_and_wording(metric: stats.Metric, ratio: float, ci: tuple[float, float], status: str,
                                       expected: str) -> None:
    """One phrasing for every metric: signed change arm − baseline as %, ratio and absolute difference."""
    assert verdict(metric, status, ratio, ci) == expected


def test_verdict_withheld() -> None:
    text = verdict(LATENCY, "client_bound", 0.5, (0.4, 0.6))
    assert text.startswith("client-bound: no verdict: TPOT mean −50.0 %") and "faster" not in text
    few = verdict(LATENCY, "too_few_cells", 0.5, None)
    assert few.startswith("too few cells: no verdict: TPOT mean −50.0 % (×0.5), −5.00 ms;")
    errors = {**ERR, "arm_failed": 30, "p": 1e-9}
    err = verdict(LATENCY, "error_rate_differs", 0.8, (0.7, 0.9), errors=errors)
    assert err.startswith("error rates differ: no verdict") and err.endswith("failed 30/200 vs 0/200 (Fisher p=1e-09)")


def test_clean_rounds_and_removes_nan() -> None:
    out = stats.clean({"a": 1.23456789, "b": [np.float64(2.0) / 3, math.nan], "c": np.int64(3), "d": -0.0})
    assert out == {"a": 1.23457, "b": [0.666667, None], "c": 3, "d": 0.0}


def test_verdict_caps_uninformative_bounds() -> None:
    text = verdict(LATENCY, "not_significant", 0.44, (1e-5, 1.8e6))
    assert text.startswith("no significant difference: TPOT mean −56.0 % (×0.44) [−100.0, +≥1000]")
