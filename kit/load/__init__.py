"""kit's load generator: one concurrency level against an OpenAI-style streaming endpoint.

The parent side (this module, imported by the rest of kit) never imports locust, gevent or
geventhttpclient: ``import locust`` monkey-patches the whole process and crashes when ``requests``,
``urllib3`` or ``docker`` came first. Locust runs in driver subprocesses (``python -m kit.load.driver``),
each in its own process group, killed on errors, ``KeyboardInterrupt`` and ``should_stop``.

``run_level(spec, out_dir)`` writes two files into ``out_dir``:

``records.jsonl`` — one JSON object per recorded request, appended and flushed as each request ends::

    arm, repeat, level ...   the spec's tags, copied into every record
    rid                      unique within the level: "w<process>-<ticket>", e.g. "w0-17"; also sent to
                             the server as the X-Request-Id header
    worker                   index of the driver process that sent it
    t_start_ns               time.perf_counter_ns() just before the request's bytes were written (after
                             any connection set-up; compare only within one worker; on Linux it is
                             CLOCK_MONOTONIC)
    wall_start               time.time() at the same moment
    ttft_ns                  first chunk carrying non-empty content, relative to t_start_ns; null if none
    chunk_ns                 arrival of every content-carrying chunk, ns relative to t_start_ns
                             (chunk_ns[0] == ttft_ns); chunks taken from the socket in one read share
                             one timestamp
    e2e_ns                   end of the response (or of the failure), relative to t_start_ns
    usage_completion_tokens  from the final usage chunk (stream_options.include_usage is always sent);
    usage_prompt_tokens      null when the server sent none
    client_tokens            content chunks counted by the client (= len(chunk_ns))
    status                   HTTP status; 0 when no response arrived
    error                    null, or a short string ("http 500: ...", "connect: connection refused",
                             "connection closed mid-stream", "timeout after 600 s", ...)

A request is ok when ``status == 200``, ``error`` is null and it got at least one content chunk. HTTP errors
are records, not exceptions. Warm-up requests (sent first, at the same concurrency) are not recorded.
The order of lines is the order of completion (per process; merged for several processes).

``client.json`` — the client's self-monitoring per process (CPU time and share of one core, a 10 ms
scheduling-lag probe with p50/p99/max and first-vs-last-third trend, inter-chunk gap median and the share of
near-zero gaps, tokens/s, CPU µs per token) and the verdict ``client_bound`` with its reasons
(``kit.load.assess``): a level where the client could not keep up must never look clean.

Failures: ``run_level`` raises ``LoadError`` when the level cannot run (bad spec, https, nothing listens
at ``base_url``, every warm-up request failed) or a driver process dies or stalls; the message names the
process and quotes its last stderr lines, kept in ``out_dir/.driver/`` (removed after a clean level).
``should_stop`` returning True ends the level early: the drivers are killed and the result comes back with
``stopped=True`` and partial records. ``on_progress`` gets ``Progress`` at most about four times a second.

Several processes: ``processes=0`` picks ``ceil(concurrency / 256)`` capped at (usable cores - 1, min 1);
``N`` splits users, budget and warm-up over N independent driver processes (each its own Locust
``LocalRunner`` and records part, merged line by line into ``records.jsonl`` while the level runs). They
all finish their warm-up, then start the level together on the parent's signal. Independent processes
were chosen over Locust's master/worker mode because per-request data then never passes through one
master's event loop and ZeroMQ (a bottleneck of its own at high token rates), a crashed process is seen
at once by its exit code, and nothing is lost at the stop (a worker does not flush its last report).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kit.errors import LoadError
from kit.load import assess
from kit.load._config import DriverConfig
from kit.load._procs import DriverGroup, Worker

__all__ = ["LevelResult", "LevelSpec", "Progress", "auto_processes", "run_level"]

ENDPOINTS = ("chat", "completions")
STREAMS_PER_PROCESS = 256
PROGRESS_MIN_INTERVAL_S = 0.25


@dataclass(frozen=True)
class LevelSpec:
    base_url: str            # e.g. "http://127.0.0.1:30000"
    endpoint: str            # "chat" -> POST /v1/chat/completions, "completions" -> POST /v1/completions
    model: str               # served model name
    concurrency: int         # exactly this many users, all spawned at once
    requests: int            # budget of recorded requests for this level (shared by all users)
    warmup_requests: int     # sent first at the same concurrency, NOT recorded
    prompt_tokens: int       # prompt length (words; deterministic text from seed)
    output_tokens: int       # max_tokens with ignore_eos: true
    seed: int
    request_timeout_s: float
    processes: int           # 0 = auto: one process per ~256 streams, capped by free cores
    tags: dict[str, str | int] = field(default_factory=dict)  # copied into every record


@dataclass(frozen=True)
class LevelResult:
    records_path: Path
    client_path: Path
    ok: int
    errors: int
    wall_s: float
    client_bound: bool
    client_bound_reasons: list[str]
    processes: int = 1           # driver processes used
    out_tokens: int = 0          # content chunks received over the level
    stopped: bool = False        # should_stop ended the level early: the records are partial


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    errors: int
    out_tokens: int
    elapsed_s: float


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_processes(concurrency: int, cores: int | None = None) -> int:
    cores = usable_cores() if cores is None else cores
    return max(1, min(math.ceil(concurrency / STREAMS_PER_PROCESS), max(1, cores - 1)))


def run_level(spec: LevelSpec, out_dir: Path, *, on_progress: Callable[[Progress], None] | None = None,
              should_stop: Callable[[], bool] | None = None) -> LevelResult:
    """Run one level; see the module docstring for what lands in ``out_dir``."""
    _validate(spec)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    records_path, client_path = out_dir / "records.jsonl", out_dir / "client.json"
    records_path.write_bytes(b"")
    client_path.unlink(missing_ok=True)
    _preflight(spec.base_url)
    n = _process_count(spec)
    work = out_dir / ".driver"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    workers = _plan(spec, n, work, records_path)
    group = DriverGroup(workers, records_path)
    relay = _ProgressRelay(spec.requests, on_progress, group)
    try:
        group.start()
        finished = group.run(_check_warmup, relay.tick, should_stop)
    finally:
        group.kill()
        group.merge_parts()
    result = _finish(spec, workers, records_path, client_path, finished)
    relay.final(result)
    shutil.rmtree(work, ignore_errors=True)
    return result


def _validate(spec: LevelSpec) -> None:
    problems = []
    if spec.endpoint not in ENDPOINTS:
        problems.append(f"endpoint {spec.endpoint!r} is not one of {', '.join(ENDPOINTS)}")
    for name in ("concurrency", "requests", "prompt_tokens", "output_tokens"):
        if getattr(spec, name) < 1:
            problems.append(f"{name} must be >= 1 (got {getattr(spec, name)})")
    if spec.warmup_requests < 0 or spec.processes < 0:
        problems.append("warmup_requests and processes must be >= 0")
    if spec.request_timeout_s <= 0:
        problems.append(f"request_timeout_s must be > 0 (got {spec.request_timeout_s})")
    url = urlsplit(spec.base_url)
    if url.scheme != "http" or not url.hostname:
        problems.append(f"base_url {spec.base_url!r} is not an http:// URL (https is not supported)")
    if problems:
        raise LoadError("cannot run load level: " + "; ".join(problems),
                        hint="fix the level's settings in the experiment manifest")


def _preflight(base_url: str) -> None:
    url = urlsplit(base_url)
    port = url.port or 80
    try:
        with socket.create_connection((url.hostname or "", port), timeout=5.0):
            pass
    except OSError as exc:
        raise LoadError(f"cannot run load level: cannot connect to {base_url} ({exc})",
                        hint="is the server up and listening on that address?") from exc


def _process_count(spec: LevelSpec) -> int:
    n = spec.processes or auto_processes(spec.concurrency)
    return max(1, min(n, spec.concurrency, spec.requests))


def _split(total: int, n: int) -> list[int]:
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def _plan(spec: LevelSpec, n: int, work: Path, records_path: Path) -> list[Worker]:
    users, budget, warm = (_split(x, n) for x in (spec.concurrency, spec.requests, spec.warmup_requests))
    workers = []
    for i in range(n):
        part = work / f"records-{i}.jsonl" if n > 1 else None
        cfg = DriverConfig(
            worker=i, base_url=spec.base_url, endpoint=spec.endpoint, model=spec.model, users=users[i],
            requests=budget[i], warmup_requests=warm[i], index_offset=sum(budget[:i]),
            warmup_index_offset=spec.requests + sum(warm[:i]), prompt_tokens=spec.prompt_tokens,
            output_tokens=spec.output_tokens, seed=spec.seed, request_timeout_s=spec.request_timeout_s,
            records_path=str(part or records_path), tags=dict(spec.tags), wait_for_go=True)
        cfg_path = work / f"driver-{i}.json"
        cfg.write(cfg_path)
        workers.append(Worker(i, cfg_path, work / f"driver-{i}.stderr", part))
    return workers


def _check_warmup(workers: list[Worker]) -> None:
    sent = sum(int(w.warm.get("requests") or 0) for w in workers)
    ok = sum(int(w.warm.get("ok") or 0) for w in workers)
    if sent and not ok:
        first = next((w.warm.get("first_error") for w in workers if w.warm.get("first_error")), "unknown")
        raise LoadError(f"cannot run load level: all {sent} warm-up requests failed (first error: {first})",
                        hint="check the endpoint, the model name and the server's log")


class _ProgressRelay:
    """Sums the drivers' progress lines and calls on_progress at most ~4 times a second."""

    def __init__(self, total: int, cb: Callable[[Progress], None] | None, group: DriverGroup) -> None:
        self.total, self.cb, self.group = total, cb, group
        self.last_call = 0.0
        self.last: Progress | None = None

    def current(self) -> Progress:
        done = errors = out = 0
        for w in self.group.workers:
            src = w.stats if w.stats is not None else w.progress
            done += int(src.get("done", (src.get("ok") or 0) + (src.get("errors") or 0)))
            errors += int(src.get("errors") or 0)
            out += int(src.get("out_tokens") or 0)
        start = self.group.go_sent_at
        elapsed = time.monotonic() - start if start is not None else 0.0
        return Progress(done, self.total, errors, out, round(elapsed, 3))

    def tick(self) -> None:
        now = time.monotonic()
        if self.cb is None or self.group.go_sent_at is None or now - self.last_call < PROGRESS_MIN_INTERVAL_S:
            return
        p = self.current()
        if self.last is None or (p.done, p.out_tokens) != (self.last.done, self.last.out_tokens):
            self.last_call, self.last = now, p
            self.cb(p)

    def final(self, result: LevelResult) -> None:
        if self.cb is not None:
            done = result.ok + result.errors
            self.cb(Progress(done, self.total, result.errors, result.out_tokens, result.wall_s))


def _finish(spec: LevelSpec, workers: list[Worker], records_path: Path, client_path: Path,
            finished: bool) -> LevelResult:
    stats = [w.stats for w in workers if w.stats is not None]
    if finished:
        reasons = assess.assess(stats)
        ok, errors = sum(s["ok"] for s in stats), sum(s["errors"] for s in stats)
        out_tokens = sum(s["out_tokens"] for s in stats)
        wall = max(s["end_wall"] for s in stats) - min(s["start_wall"] for s in stats)
    else:
        reasons = ["level stopped before its end (should_stop): records are partial"]
        ok = errors = out_tokens = 0
        for w in workers:
            ok += int(w.progress.get("done") or 0) - int(w.progress.get("errors") or 0)
            errors += int(w.progress.get("errors") or 0)
            out_tokens += int(w.progress.get("out_tokens") or 0)
        wall = float(max((w.progress.get("elapsed_s") or 0.0) for w in workers))
    result = LevelResult(records_path, client_path, ok, errors, round(wall, 4), bool(reasons), reasons,
                         processes=len(workers), out_tokens=out_tokens, stopped=not finished)
    _write_client_json(spec, result, stats, client_path)
    return result


def _write_client_json(spec: LevelSpec, result: LevelResult, stats: list[dict[str, Any]],
                       path: Path) -> None:
    doc = {
        "schema": 1,
        "spec": asdict(spec),
        "processes": result.processes,
        "usable_cores": usable_cores(),
        "ok": result.ok,
        "errors": result.errors,
        "out_tokens": result.out_tokens,
        "wall_s": result.wall_s,
        "tokens_per_s": round(result.out_tokens / result.wall_s, 1) if result.wall_s > 0 else 0.0,
        "stopped": result.stopped,
        "client_bound": result.client_bound,
        "client_bound_reasons": result.client_bound_reasons,
        "timing_warnings": assess.timing_warnings(stats),
        "thresholds": assess.thresholds(),
        "workers": stats,
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1), encoding="utf-8")
    tmp.replace(path)
