"""run_level end to end: the real driver subprocess against a real streaming server with known timing.

Timing assertions are causal or loose on purpose (this runs on a busy 2-core machine): a chunk cannot be
read before the server wrote it, a TTFT cannot be shorter than the server's delay, and a median ITL has to
land in a wide band around the server's gap.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil
import pytest

from kit.errors import LoadError
from kit.load import LevelResult, Progress, _procs, run_level
from kit.plumbing.poll import poll_until

from ._support import FakeServer, make_spec, read_records

TTFT_MS, ITL_MS = 30.0, 10.0
CLIENT_FIELDS = {"arm", "repeat", "level", "rid", "worker", "t_start_ns", "wall_start", "ttft_ns", "chunk_ns",
                 "e2e_ns", "usage_completion_tokens", "usage_prompt_tokens", "client_tokens", "status", "error",
                 "usage_flag", "sched_ns", "late_ns", "queue_ns"}


def driver_children() -> list[psutil.Process]:
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "kit.load.driver" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            continue
    return out


def run_in_thread(fn: Callable[[], LevelResult]) -> tuple[threading.Thread, dict[str, Any]]:
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, box


def wait_for(cond: Callable[[], bool], timeout: float, what: str) -> None:
    assert poll_until(cond, timeout, interval=0.05), f"timed out waiting for {what}"


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_level_records_timing_and_client_json(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(TTFT_MS, ITL_MS)
    progress: list[tuple[float, Progress]] = []
    spec = make_spec(srv.base_url)
    res = run_level(spec, tmp_path / "lvl", on_progress=lambda p: progress.append((time.monotonic(), p)))

    recs = read_records(res.records_path)
    assert len(recs) == spec.requests == res.ok and res.errors == 0
    assert {r["rid"] for r in recs} == {f"w0-{i}" for i in range(spec.requests)}   # warm-up not recorded
    server = {s["rid"]: s for s in srv.requests()}
    assert sum(1 for rid in server if "warm" in rid) == spec.warmup_requests         # but it was sent
    for r in recs:
        assert set(r) == CLIENT_FIELDS
        assert (r["arm"], r["repeat"], r["level"], r["worker"]) == ("A", 2, 4, 0)
        assert r["status"] == 200 and r["error"] is None
        n = spec.output_tokens
        assert r["client_tokens"] == len(r["chunk_ns"]) == r["usage_completion_tokens"] == n
        assert r["usage_prompt_tokens"] == spec.prompt_tokens
        assert r["ttft_ns"] == r["chunk_ns"][0] >= TTFT_MS * 1e6
        assert r["chunk_ns"] == sorted(r["chunk_ns"]) and r["e2e_ns"] >= r["chunk_ns"][-1]
        s = server[r["rid"]]
        # causality against the server's own send times (same CLOCK_MONOTONIC): never read before written
        assert all(r["t_start_ns"] + c >= w for c, w in zip(r["chunk_ns"], s["send_ns"], strict=True))
        assert r["ttft_ns"] >= s["send_ns"][0] - s["arrival_ns"]
    gaps = [b - a for r in recs for a, b in itertools.pairwise(r["chunk_ns"])]
    assert 0.5 * ITL_MS <= statistics.median(gaps) / 1e6 <= 3 * ITL_MS

    client = json.loads(res.client_path.read_text())
    assert client["ok"] == spec.requests and client["processes"] == res.processes == 1
    assert isinstance(client["client_bound"], bool) and client["client_bound"] == res.client_bound
    assert client["client_bound_reasons"] == res.client_bound_reasons
    w = client["workers"][0]
    for key in ("cpu_s", "cpu_share", "cpu_us_per_token", "tokens_per_s", "wall_s"):
        assert isinstance(w[key], float), key
    assert {"p50_ms", "p99_ms", "max_ms", "samples"} <= set(w["lag"]) and w["lag"]["samples"] > 10
    assert w["itl"]["gaps"] == len(gaps) and 0 <= w["itl"]["near_zero_share"] <= 1
    assert w["warmup"]["requests"] == spec.warmup_requests and w["warmup"]["ok"] == spec.warmup_requests

    assert progress and progress[-1][1].done == spec.requests == progress[-1][1].total
    calls = [t for t, _ in progress[:-1]]
    assert all(b - a >= 0.2 for a, b in itertools.pairwise(calls))     # at most ~4 per second
    assert not (tmp_path / "lvl" / ".driver").exists()
    assert not driver_children()


def test_completions_endpoint(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0, "--no-empty-first-chunk")
    res = run_level(make_spec(srv.base_url, endpoint="completions", requests=6, warmup_requests=0), tmp_path)
    recs = read_records(res.records_path)
    assert res.ok == 6 and all(r["client_tokens"] == 16 == r["usage_completion_tokens"] for r in recs)


def test_http_errors_are_records(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0, "--fail-every", "2")
    res = run_level(make_spec(srv.base_url, requests=10, warmup_requests=2), tmp_path)
    recs = read_records(res.records_path)
    assert len(recs) == 10 and res.ok + res.errors == 10 and res.errors >= 4
    bad = [r for r in recs if r["status"] == 500]
    assert len(bad) == res.errors
    assert all(r["error"].startswith("http 500") and r["chunk_ns"] == [] and r["ttft_ns"] is None for r in bad)


def test_all_warmups_failing_stops_the_level(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0, "--fail-every", "1")
    with pytest.raises(LoadError, match=r"all 3 warm-up requests failed .*http 500"):
        run_level(make_spec(srv.base_url), tmp_path)
    assert not driver_children()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_stalled_stream_times_out(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0, "--stall-after", "3")
    t = time.monotonic()
    res = run_level(make_spec(srv.base_url, requests=2, warmup_requests=0, concurrency=2,
                              request_timeout_s=1.0), tmp_path)
    assert time.monotonic() - t < 15
    recs = read_records(res.records_path)
    assert res.errors == 2 and all(r["error"] == "timeout after 1 s" and r["client_tokens"] == 3 for r in recs)


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_server_dying_mid_level(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    """Records flush while the level runs; a dead server makes requests fail fast; nothing hangs."""
    srv = sse_server(5.0, 25.0)  # 16 tokens: ~0.4 s per request
    spec = make_spec(srv.base_url, requests=200, warmup_requests=0, request_timeout_s=120.0)
    records = tmp_path / "records.jsonl"
    thread, box = run_in_thread(lambda: run_level(spec, tmp_path))
    wait_for(lambda: records.exists() and records.read_text().count("\n") >= 6, 30, "first records")
    seen = read_records(records)                    # complete JSON lines while the level runs
    assert thread.is_alive() and all(r["error"] is None for r in seen)
    srv.kill()
    thread.join(timeout=30)
    assert not thread.is_alive(), "run_level hung after the server died"
    res = box["result"]
    recs = read_records(res.records_path)
    assert len(recs) == spec.requests and recs[:len(seen)] == seen
    mid = [r for r in recs if r["status"] == 200 and r["error"] is not None]
    refused = [r for r in recs if r["error"] == "connect: connection refused"]
    assert mid and all("mid-stream" in r["error"] and r["client_tokens"] < 16 for r in mid)
    assert refused and all(r["status"] == 0 for r in refused)
    # a request sent on a kept-alive connection just as the server died fails in between
    known = ("connection closed", "connection reset", "connect: connection refused")
    errors = [r for r in recs if r["error"] is not None]
    assert len(errors) == res.errors and all(r["error"].startswith(known) for r in errors), errors


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_should_stop_kills_the_driver(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 50.0)
    stop_at = time.monotonic() + 3.0
    res = run_level(make_spec(srv.base_url, requests=500, warmup_requests=0), tmp_path,
                    should_stop=lambda: time.monotonic() > stop_at)
    assert res.stopped and res.client_bound and "stopped" in res.client_bound_reasons[0]
    assert time.monotonic() - stop_at < 10
    assert json.loads(res.client_path.read_text())["stopped"] is True
    assert not driver_children()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_keyboard_interrupt_leaves_no_driver(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 50.0)

    def interrupt(p: Progress) -> None:
        if p.elapsed_s > 1.0:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_level(make_spec(srv.base_url, requests=500, warmup_requests=0), tmp_path, on_progress=interrupt)
    assert not driver_children()


def test_driver_crash_raises_with_stderr(sse_server: Callable[..., FakeServer], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    srv = sse_server()
    monkeypatch.setattr(_procs, "DRIVER_MODULE", "kit.load.no_such_driver")
    with pytest.raises(LoadError, match=r"(?s)load driver process 0 .*exited with code 1.*No module named"):
        run_level(make_spec(srv.base_url), tmp_path)


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_driver_killed_mid_level(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 50.0)
    thread, box = run_in_thread(lambda: run_level(make_spec(srv.base_url, requests=100), tmp_path))
    wait_for(lambda: bool(driver_children()), 20, "the driver")
    time.sleep(1.5)
    for p in driver_children():
        p.kill()
    thread.join(timeout=20)
    assert isinstance(box.get("error"), LoadError) and "exited with code -9" in str(box["error"])
    assert not driver_children()


def test_unreachable_server_and_bad_spec(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(LoadError, match="cannot connect"):
            run_level(make_spec(f"http://127.0.0.1:{port}"), tmp_path)
    with pytest.raises(LoadError, match="endpoint 'embeddings'"):
        run_level(make_spec("http://127.0.0.1:1", endpoint="embeddings"), tmp_path)
    with pytest.raises(LoadError, match="is not an http:// or https:// URL"):
        run_level(make_spec("ftp://127.0.0.1:1"), tmp_path)
    with pytest.raises(LoadError, match=r"ca_bundle /nonexistent\.pem is not a file"):
        run_level(make_spec("https://127.0.0.1:1", ca_bundle="/nonexistent.pem"), tmp_path)


def test_parent_never_imports_locust(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    """In a fresh interpreter: requests/urllib3 first (the crash case for an in-process locust), then a level."""
    srv = sse_server(5.0, 2.0)
    code = textwrap.dedent(f"""
        import requests, urllib3, sys
        from pathlib import Path
        import kit.load
        from kit.load import LevelSpec, run_level
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("locust", "gevent", "geventhttpclient"))
        assert not bad, bad
        spec = LevelSpec("{srv.base_url}", "chat", "m", 2, 4, 1, 8, 8, 1, 30.0, 1, {{"arm": "x"}})
        res = run_level(spec, Path({str(tmp_path)!r}))
        bad = sorted(m for m in sys.modules if m.split(".")[0] in ("locust", "gevent", "geventhttpclient"))
        assert not bad, bad
        print("OK", res.ok)
    """)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "OK 4"


def test_several_processes_merge(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 5.0)
    spec = make_spec(srv.base_url, concurrency=5, requests=11, warmup_requests=3, processes=2)
    res = run_level(spec, tmp_path)
    assert res.processes == 2 and res.ok == 11
    recs = read_records(res.records_path)
    rids = [r["rid"] for r in recs]
    assert len(rids) == len(set(rids)) == 11
    assert {r["worker"] for r in recs} == {0, 1}
    assert sorted(rids) == sorted([f"w0-{i}" for i in range(6)] + [f"w1-{i}" for i in range(5)])
    assert all(r["rid"].startswith(f"w{r['worker']}-") for r in recs)
    client = json.loads(res.client_path.read_text())
    assert [w["worker"] for w in client["workers"]] == [0, 1]
    assert [w["users"] for w in client["workers"]] == [3, 2]
    assert sum(w["warmup"]["requests"] for w in client["workers"]) == 3
    assert len(srv.requests()) == 14  # 11 recorded + 3 warm-up reached the server
