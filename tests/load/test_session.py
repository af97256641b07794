"""LoadSession: driver processes reused across levels, each level still measured on its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kit.errors import LoadError
from kit.load import LoadSession, Progress
from kit.load._config import DriverConfig

from ._support import FakeServer, make_spec, read_records
from .test_run_level import driver_children, wait_for


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_levels_reuse_the_drivers(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0)
    with LoadSession(processes=1) as load:
        first = load.pids
        assert len(first) == 1
        results = []
        for conc in (1, 4, 8):
            spec = make_spec(srv.base_url, concurrency=conc, requests=2 * conc, warmup_requests=conc,
                             tags={"arm": "A", "repeat": 0, "level": conc})
            results.append((spec, load.run_level(spec, tmp_path / f"level-{conc}")))
            assert load.pids == first                       # the same process ran every level
        for spec, res in results:
            recs = read_records(res.records_path)
            assert res.ok == len(recs) == spec.requests and not res.stopped
            assert {r["rid"] for r in recs} == {f"w0-{i}" for i in range(spec.requests)}
            assert {r["level"] for r in recs} == {spec.concurrency}
            client = json.loads(res.client_path.read_text())
            w = client["workers"][0]
            assert w["pid"] == first[0] and w["users"] == spec.concurrency and w["requests"] == spec.requests
            assert w["ok"] == spec.requests and w["warmup"]["requests"] == spec.warmup_requests
            # per-level self-monitoring: CPU and lag are the level's, not the process's lifetime
            assert 0 < w["cpu_s"] <= w["wall_s"] * 1.2 + 0.05
            assert w["lag"]["samples"] <= w["wall_s"] / 0.01 + 5
            assert w["itl"]["gaps"] == spec.requests * (spec.output_tokens - 1)
            assert not (res.records_path.parent / ".driver").exists()
        assert len(srv.requests()) == sum(s.requests + s.warmup_requests for s, _ in results)
    assert not driver_children()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_more_processes_start_fewer_leave_the_rest_idle(sse_server: Callable[..., FakeServer],
                                                        tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0)
    with LoadSession(processes=1) as load:
        one = load.pids
        res = load.run_level(make_spec(srv.base_url, concurrency=5, requests=11, processes=2), tmp_path / "a")
        assert res.processes == 2 and res.ok == 11 and load.pids[:1] == one and len(load.pids) == 2
        recs = read_records(res.records_path)
        assert sorted(r["rid"] for r in recs) == sorted([f"w0-{i}" for i in range(6)] +
                                                        [f"w1-{i}" for i in range(5)])
        res = load.run_level(make_spec(srv.base_url, processes=1), tmp_path / "b")
        assert res.processes == 1 and res.ok == 12 and len(load.pids) == 2
    assert not driver_children()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_should_stop_then_the_next_level_runs(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 50.0)
    with LoadSession() as load:
        old = load.pids
        stop_at = time.monotonic() + 2.0
        res = load.run_level(make_spec(srv.base_url, requests=500, warmup_requests=0), tmp_path / "a",
                             should_stop=lambda: time.monotonic() > stop_at)
        assert res.stopped and res.client_bound
        assert load.pids == [] and not driver_children()    # a stopped level's drivers are not reused
        res = load.run_level(make_spec(srv.base_url, requests=4, output_tokens=4), tmp_path / "b")
        assert res.ok == 4 and not res.stopped and load.pids != old
    assert not driver_children()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_idle_driver_that_died_is_replaced(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0)
    with LoadSession() as load:
        load.run_level(make_spec(srv.base_url), tmp_path / "a")
        (pid,) = load.pids
        os.kill(pid, signal.SIGKILL)
        # exited, not yet reaped (a zombie leader whose threads are still exiting does not count yet)
        exited = lambda: os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None  # noqa: E731
        wait_for(exited, 10, "the killed driver")
        res = load.run_level(make_spec(srv.base_url), tmp_path / "b")
        assert res.ok == 12 and load.pids != [pid]
    assert not driver_children()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_errors_and_interrupts_leave_no_driver(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    bad = sse_server(5.0, 2.0, "--fail-every", "1")
    good = sse_server(5.0, 50.0)
    with LoadSession() as load:
        with pytest.raises(LoadError, match="warm-up requests failed"):
            load.run_level(make_spec(bad.base_url), tmp_path / "a")
        assert load.pids == []
        assert load.run_level(make_spec(good.base_url, requests=2, output_tokens=2), tmp_path / "b").ok == 2

    def interrupt(p: Progress) -> None:
        if p.elapsed_s > 0.5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt), LoadSession(processes=2) as load:
        load.run_level(make_spec(good.base_url, requests=500, warmup_requests=0), tmp_path / "c",
                       on_progress=interrupt)
    assert not driver_children()


def test_driver_runs_one_level_from_a_config_file(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    """``python -m kit.load.driver CONFIG.json``: one level without a parent session, then exit 0."""
    srv = sse_server(5.0, 2.0)
    records = tmp_path / "records.jsonl"
    cfg = DriverConfig(worker=0, base_url=srv.base_url, endpoint="chat", model="m", users=2, requests=4,
                       warmup_requests=1, index_offset=0, warmup_index_offset=4, prompt_tokens=8, output_tokens=4,
                       seed=1, request_timeout_s=30.0, records_path=str(records), tags={"arm": "x"})
    cfg.write(tmp_path / "driver.json")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run([sys.executable, "-m", "kit.load.driver", str(tmp_path / "driver.json")], env=env,
                         capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    events = [json.loads(line)["event"] for line in out.stdout.splitlines()]
    assert events[-1] == "done" and "warm" in events and "start" in events
    assert len(read_records(records)) == 4


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_load_cpus_pin_every_driver_and_are_recorded(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    from kit.plumbing.affinity import available_cpus, process_cpus

    last = str(max(available_cpus()))
    srv = sse_server(5.0, 2.0)
    spec = make_spec(srv.base_url, concurrency=2, requests=4, warmup_requests=0, processes=2, cpus=last,
                     tags={"arm": "A", "repeat": 0, "level": 2})
    with LoadSession(processes=2, cpus=last) as load:
        assert [process_cpus(p) for p in load.pids] == [last, last]
        res = load.run_level(spec, tmp_path / "level-2")
    client = json.loads(res.client_path.read_text())
    assert res.ok == 4 and client["spec"]["cpus"] == last and client["usable_cores"] == 1
