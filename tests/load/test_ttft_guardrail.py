"""The TTFT guardrail: ``ttft_client_bound`` when the client's own share of TTFT p99 may exceed 5 ms.

Pure tests on synthetic worker stats, and real levels against the fake server: a normal one reports the
per-request first-chunk read lag, and one whose driver blocks before every first-chunk read (the
test-only ``KIT_LOAD_TEST_FIRST_READ_DELAY_MS``) is flagged from that lag. No timing of this machine is
asserted beyond the injected delay.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kit.files.client import ClientReport
from kit.load import assess, run_level

from ._support import FakeServer, make_spec


def _stats(**over: Any) -> dict[str, Any]:
    stats: dict[str, Any] = {
        "worker": 0, "cpu_share": 0.5, "cpu_window_s": 0.5, "cpu_window_share_max": 0.7,
        "lag": {"samples": 500, "p50_ms": 0.3, "p99_ms": 2.0, "max_ms": 4.0},
        "itl": {"gaps": 10000, "median_ms": 20.0, "p99_ms": 22.0, "near_zero_share": 0.001},
        "first_read": {"requests": 1000, "p50_ms": 0.2, "p99_ms": 1.5, "max_ms": 3.0},
    }
    stats.update(over)
    return stats


def test_clean_level_has_no_ttft_reasons() -> None:
    workers: list[Any] = [_stats(), _stats(worker=1)]
    assert assess.assess_ttft(workers) == []
    assert assess.ttft_client_share_ms(workers) == 2.0     # the larger of first-read and probe p99


@pytest.mark.parametrize(("over", "needle"), [
    ({"first_read": {"requests": 1024, "p50_ms": 3.0, "p99_ms": 38.0, "max_ms": 45.0}},
     "first-chunk read lag p99 38.0 ms over 1024 requests"),
    ({"lag": {"samples": 500, "p50_ms": 1.0, "p99_ms": 7.5, "max_ms": 9.0}}, "scheduling lag p99 7.5 ms"),
    ({"cpu_window_share_max": 0.97}, "CPU peaked at 97% of one core in a 0.5 s window"),
])
def test_each_signal_flags_ttft(over: dict[str, Any], needle: str) -> None:
    workers: list[Any] = [_stats(), _stats(worker=1, **over)]
    reasons = assess.assess_ttft(workers)
    assert len(reasons) == 1 and reasons[0].startswith("process 1") and needle in reasons[0], reasons


def test_average_cpu_below_the_limit_does_not_hide_a_saturated_window() -> None:
    # the measured 1024-stream case: level average 70 % (not client-bound), windows up to 96 %, lag 40 ms
    w: Any = _stats(cpu_share=0.70, cpu_window_share_max=0.96,
                    first_read={"requests": 1024, "p50_ms": 2.0, "p99_ms": 40.0, "max_ms": 45.0})
    assert assess.assess([w]) == []
    assert len(assess.assess_ttft([w])) == 2
    assert assess.ttft_client_share_ms([w]) == 40.0


def test_limits_are_strict_and_unmeasured_is_not_evidence() -> None:
    at_limit: Any = _stats(first_read={"requests": 10, "p50_ms": 1.0, "p99_ms": 5.0, "max_ms": 5.0},
                           lag={"samples": 10, "p50_ms": 1.0, "p99_ms": 5.0, "max_ms": 5.0},
                           cpu_window_share_max=0.949)
    assert assess.assess_ttft([at_limit]) == []
    old: Any = {"worker": 0, "lag": {"samples": 0, "p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}}
    assert assess.assess_ttft([old]) == [] and assess.ttft_client_share_ms([old]) is None
    assert assess.thresholds()["ttft_client_share_ms"] == 5.0


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_first_read_lag_is_measured_per_request(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(30.0, 10.0)
    spec = make_spec(srv.base_url)
    res = run_level(spec, tmp_path / "lvl")
    client = json.loads(res.client_path.read_text())
    ClientReport.model_validate(client)
    first = client["workers"][0]["first_read"]
    assert first["requests"] == spec.requests == res.ok
    assert 0 <= first["p50_ms"] <= first["p99_ms"] <= first["max_ms"]
    assert client["ttft_client_bound"] == res.ttft_client_bound == bool(client["ttft_client_bound_reasons"]
                                                                        or client["client_bound"])
    assert client["ttft_client_share_p99_ms"] >= first["p99_ms"]


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_slow_first_read_is_flagged(sse_server: Callable[..., FakeServer], tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The kernel coalesces TCP segments that wait in the receive queue into one buffer stamped with the newest
    # one's time, so a first chunk read together with later tokens shows only the lag from the last of them (a
    # lower bound). One user and tokens 100 ms apart: each first chunk is alone in the queue when its read's block
    # starts, and nothing else arrives before the read, so the whole block is in its lag.
    monkeypatch.setenv("KIT_LOAD_TEST_FIRST_READ_DELAY_MS", "15")   # inherited by the driver process
    srv = sse_server(30.0, 100.0)
    spec = make_spec(srv.base_url, concurrency=1, requests=6, warmup_requests=1, output_tokens=2)
    res = run_level(spec, tmp_path / "lvl")
    assert res.ok == spec.requests and res.ttft_client_bound
    client = ClientReport.model_validate_json(res.client_path.read_text())
    assert client.ttft_client_bound
    assert any("first-chunk read lag" in r for r in client.ttft_client_bound_reasons), \
        client.ttft_client_bound_reasons
    first = client.workers[0].first_read
    assert first is not None and first.requests == spec.requests
    assert first.p99_ms is not None and first.p99_ms >= 15.0     # every first chunk waited out the block
    assert client.ttft_client_share_p99_ms is not None and client.ttft_client_share_p99_ms >= 15.0
