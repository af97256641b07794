"""kit's real load driver against a real hostile server (tests/support/hostile_server.py, its own process on a
free loopback port): every class of answer that once blew up memory, CPU or the records is cut per request.

For each class, a third of the recorded requests get the hostile answer and the rest a normal one; the test checks
that the driver process's peak RSS (VmHWM, reset before the level) stays under 300 MB, that each request ended
within its timeout + 5 s (the driver's own e2e and, from outside, the server's log of when the client went away),
that each hostile request carries an error naming the bound it broke, and that every other request is kept, ok.
Usage counts a server cannot have meant are flagged (not errors), and an arm that over-reports its tokens gets
no A/B verdict (the stats-level check through ``summarize_level`` and ``compare_levels``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kit.files.bounds import max_events
from kit.load import LevelResult, LoadSession
from kit.plumbing.poll import poll_until
from kit.stats.ab import compare_levels
from kit.stats.figures import cell_level_figures
from kit.stats.requests import reduce_records
from kit.stats.summary import CellInfo, summarize_level
from kit.stats.verdict import WITHHELD

from ._support import make_spec, read_records

SERVER = Path(__file__).resolve().parents[1] / "support" / "hostile_server.py"
TOKENS = 16
TIMEOUT_S = 3.0
EVERY = 3  # tickets 0, 3, 6, 9 of 12 get the hostile answer
REQUESTS = 12
PEAK_RSS_MB = 300

pytestmark = pytest.mark.slow  # a real driver process and a dozen levels against a real server: ~30-60 s

CUTS = {  # mode -> (status, the start of the request's error)
    "error-body": (500, "http 500: something broke: xxx"),
    "endless-line": (200, "SSE line over 256 KiB"),
    "event-flood": (200, f"over {max_events(TOKENS)} SSE events for max_tokens {TOKENS}"),
    "comment-flood": (200, f"timeout after {TIMEOUT_S:g} s"),  # a socket never idle: the timeout still holds
    "huge-headers": (0, "response head over 64 KiB"),
    "slow-headers": (0, f"timeout after {TIMEOUT_S:g} s"),
    "after-done": (200, "an SSE event after [DONE]"),  # else its token would be timed and counted
}


class Hostile:
    def __init__(self, tmp: Path) -> None:
        self.log = tmp / "hostile.jsonl"
        self.proc = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--log", str(self.log)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line.startswith("LISTENING"), f"hostile server did not start: {line!r}"
        self.base_url = f"http://127.0.0.1:{int(line.split()[1])}"

    def entries(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(x) for x in self.log.read_text().splitlines() if x.strip()]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    srv = Hostile(tmp_path_factory.mktemp("hostile"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def session() -> Iterator[LoadSession]:
    with LoadSession(processes=1) as s:  # one driver process for every level of the module
        yield s


def _peak_reset(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets the process's VmHWM (peak RSS) to its RSS now


def _peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmHWM in /proc/{pid}/status")


def _level(session: LoadSession, srv: Hostile, mode: str, out: Path, *, every: int = EVERY, arm: str = "A",
           repeat: int = 1, requests: int = REQUESTS) -> tuple[LevelResult, list[dict[str, Any]], float, float]:
    """One level whose model asks the server for ``mode``; (result, records, driver peak RSS MB, wall s)."""
    (pid,) = session.pids
    _peak_reset(pid)
    spec = make_spec(srv.base_url, model=f"{mode}/{every}", concurrency=4, requests=requests, warmup_requests=2,
                     output_tokens=TOKENS, request_timeout_s=TIMEOUT_S,
                     tags={"arm": arm, "repeat": repeat, "level": 4})
    t0 = time.monotonic()
    res = session.run_level(spec, out)
    wall = time.monotonic() - t0
    (after,) = session.pids
    assert after == pid, "the driver process was replaced: the level failed"
    return res, read_records(res.records_path), _peak_mb(pid), wall


def _hostile_rids(every: int, requests: int = REQUESTS) -> set[str]:
    return {f"w0-{t}" for t in range(requests) if t % every == 0}


def _kept(r: dict[str, Any]) -> bool:
    return (r["status"] == 200 and r["error"] is None and r["client_tokens"] == TOKENS
            and r["usage_completion_tokens"] == TOKENS and r["usage_flag"] is None)


@pytest.mark.parametrize("mode", ["normal", "eol=cr", "eol=crlf", "eol=crlf-split", "eol=mixed", *CUTS])
def test_a_hostile_answer_is_cut_per_request_and_the_others_kept(hostile: Hostile, session: LoadSession,
                                                                 tmp_path: Path, mode: str) -> None:
    res, recs, peak, wall = _level(session, hostile, mode, tmp_path / mode)
    bad = _hostile_rids(EVERY) if mode in CUTS else set()
    e2e_max = max(r["e2e_ns"] for r in recs) / 1e9
    # the server's view: how long each hostile answer went on before the client went away
    served: dict[str, float] = {}

    def logged() -> bool:
        served.update({e["rid"]: e["end"] - e["start"] for e in hostile.entries() if e["rid"] in bad})
        return set(served) >= bad

    assert poll_until(logged, TIMEOUT_S + 10, interval=0.05), f"the server logged {sorted(served)} of {sorted(bad)}"
    size = res.records_path.stat().st_size
    print(f"\n[hostile {mode}] driver peak RSS {peak:.1f} MB; level wall {wall:.2f} s; slowest request (driver) "
          f"{e2e_max:.3f} s; hostile answers served for up to {max(served.values(), default=0):.3f} s; "
          f"records.jsonl {size} bytes; errors: {sorted({str(r['error'])[:60] for r in recs if r['error']})}")
    assert peak < PEAK_RSS_MB
    assert len(recs) == REQUESTS and {r["rid"] for r in recs} == {f"w0-{t}" for t in range(REQUESTS)}
    assert all(r["e2e_ns"] <= (TIMEOUT_S + 5) * 1e9 for r in recs)
    assert all(d <= TIMEOUT_S + 5 for d in served.values()), served
    for r in recs:
        if r["rid"] in bad:
            status, error = CUTS[mode]
            assert r["status"] == status and str(r["error"]).startswith(error), r["error"]
            assert len(r["chunk_ns"]) <= max_events(TOKENS)
        else:
            assert _kept(r), r
    assert res.ok == REQUESTS - len(bad) and res.errors == len(bad)
    assert size < 64 << 10  # no record grew with what the server sent


USAGE = {  # mode -> (the usage_completion_tokens recorded, the start of the flag)
    "usage=-5": (None, "usage.completion_tokens -5 is not an integer"),
    "usage=1e30": (None, "usage.completion_tokens 1e+30 is not an integer"),
    "usage=" + "9" * 4000: (None, "usage.completion_tokens 9999"),
    'usage="16"': (None, "usage.completion_tokens '16' is not an integer"),
    "usage=15": (15, f"usage.completion_tokens 15 below the client's {TOKENS} content events"),
    "inflate=10": (18, f"usage.completion_tokens 18 above the max_tokens {TOKENS} asked"),
}


@pytest.mark.parametrize("mode", list(USAGE))
def test_usage_a_server_cannot_have_meant_is_flagged_not_an_error(hostile: Hostile, session: LoadSession,
                                                                  tmp_path: Path, mode: str) -> None:
    res, recs, peak, wall = _level(session, hostile, mode, tmp_path / "u", every=2)
    print(f"\n[hostile {mode[:20]}] driver peak RSS {peak:.1f} MB; level wall {wall:.2f} s; slowest request "
          f"{max(r['e2e_ns'] for r in recs) / 1e9:.3f} s")
    assert peak < PEAK_RSS_MB
    bad = _hostile_rids(2)
    usage, flag = USAGE[mode]
    assert res.ok == REQUESTS and res.errors == 0  # flagged, not failed
    for r in recs:
        if r["rid"] in bad:
            assert r["status"] == 200 and r["error"] is None and r["client_tokens"] == TOKENS
            assert r["usage_completion_tokens"] == usage and str(r["usage_flag"]).startswith(flag), r["usage_flag"]
        else:
            assert _kept(r), r
    lr = reduce_records(recs, requested=TOKENS)
    assert lr.usage_flagged == len(bad)
    assert set(lr.matrix[:, 6]) == {float(TOKENS)}  # every request's timing uses the client's count
    client = json.loads(res.client_path.read_text())
    assert all(w["usage_completion_tokens"] <= REQUESTS * 18 for w in client["workers"])


def test_more_content_events_than_asked_without_a_usage_count_is_flagged(hostile: Hostile, session: LoadSession,
                                                                        tmp_path: Path) -> None:
    """A server that sends 3x the events asked and no usage chunk would look 3x faster per token (a review's
    server did: "liar faster: TPOT -74.9 %"); each event is a token at least, so the count cannot be true."""
    res, recs, _, _ = _level(session, hostile, f"overdeliver={3 * TOKENS}", tmp_path / "o", every=2)
    bad = _hostile_rids(2)
    assert res.ok == REQUESTS and res.errors == 0  # flagged, not failed
    for r in recs:
        if r["rid"] in bad:
            assert r["client_tokens"] == 3 * TOKENS and r["usage_completion_tokens"] is None
            assert r["usage_flag"] == f"{3 * TOKENS} content events above the max_tokens {TOKENS} asked " \
                                      "(and no usage count)"
        else:
            assert _kept(r), r
    assert reduce_records(recs, requested=TOKENS).usage_flagged == len(bad)


def test_an_arm_whose_server_over_reports_gets_no_verdict(hostile: Hostile, session: LoadSession,
                                                          tmp_path: Path) -> None:
    measured = []
    for arm, mode in (("A", "normal"), ("B", "inflate=10")):
        for repeat in (1, 2):
            res, recs, _, _ = _level(session, hostile, mode, tmp_path / f"{arm}{repeat}", every=1, arm=arm,
                                     repeat=repeat, requests=6)
            lr = reduce_records(recs, requested=TOKENS)
            figs = cell_level_figures(lr, json.loads(res.client_path.read_text()), None, requested=TOKENS)
            measured.append((CellInfo(f"{arm}-r{repeat}", arm, repeat, 0, "ok", None), lr, figs))
    level = summarize_level({"concurrency": 4, "requests": 6, "warmup": 2}, ["A", "B"], 0.95, measured)
    assert [(a["arm"], a["usage_flagged"], a["output_tokens"]) for a in level.arm_levels] == \
        [("A", 0, 12 * TOKENS), ("B", 12, 12 * TOKENS)]
    comparisons, _, _ = compare_levels([level.samples], ["A", "B"], "A", primary="tpot_mean_ms",
                                       correction="holm", confidence=0.95)
    primary = next(c for c in comparisons if c["role"] == "primary")
    print(f"\n[hostile inflate=10 A/B] primary: {primary['status']}: {primary['verdict']}")
    assert primary["status"] == "usage_flagged" and not primary["significant"]
    assert primary["usage"] is not None and (primary["usage"]["arm_flagged"], primary["usage"]["arm_ok"]) == (12, 12)
    assert primary["verdict"].startswith(WITHHELD["usage_flagged"].removesuffix(": no verdict"))
    assert "usage flagged 12/12 vs 0/12" in primary["verdict"]
    assert {c["status"] for c in comparisons if c["tested"]} == {"usage_flagged"}
