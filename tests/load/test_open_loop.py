"""Open-loop levels end to end: the real driver against a real streaming server that logs when each request
arrived (its own clock, ``benchmarks/sse_server.py``), judged with scipy's KS test, not with kit's numbers.

The server's ``arrival_ns`` and the driver's ``perf_counter_ns`` are both CLOCK_MONOTONIC on this host, so the
server's arrival times can be held against the level's start (``due - sched_ns`` of any record).
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from scipy import stats

from kit.bundle.schedules import send_time_problems
from kit.files.records import steady_window
from kit.load import run_level
from kit.load.arrivals import Arrival, schedule_ns

from ._support import FakeServer, make_spec, read_records


def level_start(recs: list[dict]) -> int:
    """The level's t0 on the monotonic clock: every record's due time minus its scheduled offset."""
    starts = {r["t_start_ns"] - r["late_ns"] - r["queue_ns"] - r["sched_ns"] for r in recs}
    assert max(starts) - min(starts) <= 1, "every record must place the level's start at the same instant"
    return min(starts)


def arrivals_at_server(srv: FakeServer) -> list[int]:
    return sorted(s["arrival_ns"] for s in srv.requests() if "warm" not in s["rid"])


# counts: enough for the KS test to see a rate 15 % off (checked in test_arrivals), time bounded: 25 s at 1/s
@pytest.mark.slow
@pytest.mark.parametrize(("rate", "count"), [(1.0, 25), (10.0, 100), (100.0, 1000)])
def test_poisson_sends_pass_ks_at_the_rate(sse_server: Callable[..., FakeServer], tmp_path: Path,
                                           rate: float, count: int) -> None:
    srv = sse_server(2.0, 5.0)
    spec = make_spec(srv.base_url, concurrency=64, requests=count, warmup_requests=4, output_tokens=4,
                     arrival="poisson", rate=rate, arrival_seed=42)
    res = run_level(spec, tmp_path / "lvl")
    recs = read_records(res.records_path)
    assert res.ok == count == len(recs)
    # what was intended is what the records say was scheduled, request by request
    want = schedule_ns(Arrival("poisson", rate, 1.0, 42), count)
    assert sorted(r["sched_ns"] for r in recs) == want
    t0 = level_start(recs)
    at_server = arrivals_at_server(srv)
    assert len(at_server) == count
    # the client's lateness is a lower bound of what the server saw (it arrived after it was sent)
    arrived = {s["rid"]: s["arrival_ns"] for s in srv.requests()}
    assert all(arrived[r["rid"]] - (t0 + r["sched_ns"]) >= r["late_ns"] for r in recs)
    client = json.loads(res.client_path.read_text())
    late = client["workers"][0]["lateness"]
    # the gaps between the requests as sent (stamped just before their bytes went out), against the exponential
    # at the rate asked for; the rate achieved as the server's own clock saw it
    sent = sorted(r["t_start_ns"] for r in recs)
    gaps = [b - a for a, b in zip([t0, *sent[:-1]], sent, strict=True)]
    ks = stats.kstest([g / 1e9 for g in gaps], "expon", args=(0, 1 / rate))
    achieved = count / ((at_server[-1] - t0) / 1e9)
    print(f"rate {rate}: KS p {ks.pvalue:.3f}, achieved {achieved:.3f}/s at the server, client sent_rate "
          f"{client['workers'][0]['sent_rate']}, lateness p50/p99/max {late['p50_ms']:.2f}/{late['p99_ms']:.2f}/"
          f"{late['max_ms']:.2f} ms, client-bound {res.client_bound_reasons}")
    if ks.pvalue <= 0.001 or achieved != pytest.approx(rate, rel=0.02):
        # the driver could not keep up on this machine: then its own lateness must have said so
        assert any("sent late" in why for why in res.client_bound_reasons), (ks, achieved, late)
    else:
        assert client["workers"][0]["sent_rate"] == pytest.approx(achieved, rel=0.01)


@pytest.mark.slow
def test_gamma_burstiness_shows_in_the_sent_gaps(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(2.0, 1.0)
    rate, burstiness, count = 20.0, 0.25, 200
    spec = make_spec(srv.base_url, concurrency=64, requests=count, warmup_requests=2, output_tokens=4,
                     arrival="gamma", rate=rate, burstiness=burstiness, arrival_seed=9)
    res = run_level(spec, tmp_path / "lvl")
    recs = read_records(res.records_path)
    t0 = level_start(recs)
    at_server = arrivals_at_server(srv)
    gaps = [(b - a) / 1e9 for a, b in zip([t0, *at_server[:-1]], at_server, strict=True)]
    cv = statistics.stdev(gaps) / statistics.mean(gaps)
    assert cv == pytest.approx(burstiness ** -0.5, rel=0.2)  # 2.0; a Poisson process has 1
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue < 0.001


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_max_concurrency_caps_what_is_in_flight_and_the_wait_is_recorded(
        sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(150.0, 5.0)  # each request takes ~0.2 s: at 40 req/s two users cannot keep up
    spec = make_spec(srv.base_url, concurrency=2, requests=12, warmup_requests=0, output_tokens=4,
                     arrival="poisson", rate=40.0, arrival_seed=1)
    res = run_level(spec, tmp_path / "lvl")
    recs = read_records(res.records_path)
    assert res.ok == 12
    spans = sorted((s["arrival_ns"], s["send_ns"][-1]) for s in srv.requests())
    in_flight = max(sum(1 for a, e in spans if a <= t < e) for t, _ in spans)
    assert in_flight <= 2
    assert sum(1 for r in recs if r["queue_ns"] > 50_000_000) >= 6  # waited for a free user, said so
    doc = json.loads(res.client_path.read_text())
    queue = doc["workers"][0]["queue"]
    assert queue["requests"] == 12 and queue["max_ms"] > 50
    # the queue counts only while both users were busy, and ends when one was freed: a user is busy from when its
    # request fell due (scheduled, or freed after a queue) to the request's end; at a queued request's due time both
    # were, and its queue ended exactly when another request ended. The client's own work after that end (records,
    # the release, a descheduled process) is its lateness, not the cap's queue: CI's loaded machine once put a due
    # time in that gap, when the queue ran to the release instead of the end
    t0 = level_start(recs)
    busy = [(t0 + r["sched_ns"] + r["queue_ns"], r["t_start_ns"] + r["e2e_ns"]) for r in recs]
    ends = {e for _, e in busy}
    for r in (r for r in recs if r["queue_ns"] > 0):
        due, freed = t0 + r["sched_ns"], t0 + r["sched_ns"] + r["queue_ns"]
        assert sum(1 for a, e in busy if a <= due < e) == 2
        assert freed in ends
    assert any("waited for the cap" in w for w in doc["timing_warnings"])


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_time_limited_closed_level_stops_sending_at_its_duration(
        sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(20.0, 2.0)
    spec = make_spec(srv.base_url, concurrency=3, requests=100_000, warmup_requests=3, output_tokens=4,
                     duration_s=1.0)
    res = run_level(spec, tmp_path / "lvl")
    recs = read_records(res.records_path)
    assert 10 < res.ok == len(recs) < 1000
    first = min(r["t_start_ns"] for r in recs)
    assert max(r["t_start_ns"] for r in recs) - first <= 1.0e9
    assert res.wall_s < 3.0


def test_steady_window_spreads_the_closed_loop_start_and_drops_the_ramp(
        sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(40.0, 5.0)  # ~60 ms per request
    spec = make_spec(srv.base_url, concurrency=4, requests=40, warmup_requests=4, output_tokens=4, window="steady")
    res = run_level(spec, tmp_path / "lvl")
    recs = sorted(read_records(res.records_path), key=lambda r: r["t_start_ns"])
    worker = json.loads(res.client_path.read_text())["workers"][0]
    win = worker["window"]
    # the users' first requests went out one warm-up E2E / users apart, not all at once
    firsts = [r["t_start_ns"] for r in recs[:4]]
    assert win["stagger_ns"] > 5_000_000
    assert min(b - a for a, b in itertools.pairwise(firsts)) > win["stagger_ns"] * 0.5
    assert win["start_ns"] == firsts[-1] and win["end_ns"] == recs[-1]["t_start_ns"]
    keep = steady_window([worker])
    kept = [r for r in recs if keep(r)]
    assert 10 < len(kept) < 40
    # selected on send time only: every request sent in [start, end], however long it took
    assert kept == [r for r in recs if win["start_ns"] <= r["t_start_ns"] <= win["end_ns"]]
    assert recs[0] not in kept and recs[-1] in kept  # the ramp's first send out; the last send ends the window


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_several_processes_share_one_schedule(sse_server: Callable[..., FakeServer], tmp_path: Path) -> None:
    srv = sse_server(5.0, 2.0)
    spec = make_spec(srv.base_url, concurrency=8, requests=30, warmup_requests=2, output_tokens=4, processes=2,
                     arrival="gamma", rate=30.0, burstiness=2.0, arrival_seed=4)
    res = run_level(spec, tmp_path / "lvl")
    recs = read_records(res.records_path)
    assert res.ok == 30 and {r["worker"] for r in recs} == {0, 1}
    # dealt round-robin: together the two processes sent the whole schedule, each a thinned copy over the level
    assert sorted(r["sched_ns"] for r in recs) == schedule_ns(Arrival("gamma", 30.0, 2.0, 4), 30)
    workers = json.loads(res.client_path.read_text())["workers"]
    assert [w["scheduled"] for w in workers] == [15, 15]
    assert sum(w["offered_rate"] for w in workers) == pytest.approx(30.0, rel=0.15)
    assert {s["rid"] for s in srv.requests() if "warm" not in s["rid"]} == {r["rid"] for r in recs}
    # one common start (CLOCK_MONOTONIC, the parent's) for both processes, not one clock each; every send placed
    doc = json.loads(res.client_path.read_text())
    assert isinstance(doc["start_ns"], int)
    assert all(abs(w["t0_ns"] - doc["start_ns"]) < 1_000_000 and w["start_skew_ns"] >= 0 for w in workers)
    assert send_time_problems(recs, workers) == ([], 30)
    assert level_start(recs) == pytest.approx(doc["start_ns"], abs=1_000_000)
