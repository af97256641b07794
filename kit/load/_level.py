"""One level over a set of driver processes: hand each its share, relay progress, start the level together
after the warm-up, merge records parts, and turn the drivers' stats into ``LevelResult`` and ``client.json``.

Standard library only (parent side).
"""

from __future__ import annotations

import json
import selectors
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal, cast

from kit.errors import LoadError
from kit.load import arrivals, assess
from kit.load._config import DriverConfig
from kit.load._procs import DriverProcess, stderr_tail
from kit.load.messages import DoneEvent, ProgressEvent, WarmEvent, WorkerStats
from kit.load.spec import LevelResult, LevelSpec, Progress, split, usable_cores
from kit.plumbing.files import atomic_write
from kit.plumbing.jsontypes import loads
from kit.plumbing.redact import redact, redact_json

HEARTBEAT_TIMEOUT_S = 60.0
START_MARGIN_NS = 250_000_000    # the common start lies this far after "go" is sent ...
START_PER_USER_NS = 500_000      # ... plus this per user of the largest process (spawning them takes time)
PROGRESS_MIN_INTERVAL_S = 0.25
State = Literal["starting", "warm", "running", "done"]
_DOING: dict[State, str] = {"starting": "starting or in its warm-up", "warm": "waiting for the level's start",
                            "running": "running the level", "done": "done"}


@dataclass
class Slot:
    """One driver process's part in one level."""

    index: int
    proc: DriverProcess
    config: DriverConfig
    stderr_copy: Path                  # where its stderr of this level lands if the level fails
    stderr_offset: int                 # its stderr before this level (earlier levels) is not quoted
    part_path: Path | None             # a records part to merge, or None when it writes records.jsonl
    state: State = "starting"
    warm: WarmEvent | None = None
    progress: ProgressEvent | None = None
    stats: WorkerStats | None = None
    part_offset: int = 0


def plan(spec: LevelSpec, procs: list[DriverProcess], work: Path, records_path: Path) -> list[Slot]:
    n = len(procs)
    # open loop: never more users than requests scheduled (a cap above the count cannot bind)
    cap = min(spec.concurrency, spec.scheduled()) if spec.arrivals.open_loop else spec.concurrency
    users, budget, warm = (split(x, n) for x in (cap, spec.scheduled(), spec.warmup_requests))
    dealt = arrivals.split(arrivals.schedule_ns(spec.arrivals, spec.scheduled()), n) \
        if spec.arrivals.open_loop else None
    slots = []
    for i, proc in enumerate(procs):
        part = work / f"records-{i}.jsonl" if n > 1 else None
        index, due = dealt[i] if dealt is not None else (None, None)
        cfg = DriverConfig(
            worker=i, base_url=spec.base_url, endpoint=spec.endpoint, model=spec.model, users=users[i],
            requests=budget[i], warmup_requests=warm[i], index_offset=sum(budget[:i]),
            warmup_index_offset=spec.requests + sum(warm[:i]), prompt_tokens=spec.prompt_tokens,
            output_tokens=spec.output_tokens, seed=spec.seed, request_timeout_s=spec.request_timeout_s,
            records_path=str(part or records_path), tags=dict(spec.tags), wait_for_go=True, dialect=spec.dialect,
            schedule_ns=due, schedule_index=index, duration_s=spec.duration_s, window=spec.window,
            workload_path=spec.workload, body_fields=dict(spec.body_fields), seed_per_request=spec.seed_per_request,
            headers=dict(spec.headers), header_env=dict(spec.header_env), secret_env=list(spec.secret_env),
            ca_bundle=spec.ca_bundle,
            verify_tls=spec.verify_tls)
        if due is not None:
            cfg = replace(cfg, requests=len(due))
        offset = proc.stderr_size() if proc.levels else 0
        slots.append(Slot(i, proc, cfg, work / f"driver-{i}.stderr", offset, part))
    return slots


class LevelRun:
    """Drives the slots of one level to their end; the caller stops the processes if it does not end well."""

    def __init__(self, slots: list[Slot], records_path: Path) -> None:
        self.slots = slots
        self.records_path = records_path
        self.go_sent_at: float | None = None
        self.start_ns: int | None = None  # the level's common start (CLOCK_MONOTONIC ns), sent with "go"

    def run(self, on_tick: Callable[[], None], should_stop: Callable[[], bool] | None) -> bool:
        """Return False when ``should_stop`` ended the level early."""
        with selectors.DefaultSelector() as sel:
            for s in self.slots:
                s.proc.drop_pending()
                sel.register(s.proc.stdout_fd, selectors.EVENT_READ, s)
                s.proc.send_level(asdict(s.config))
            while any(s.state != "done" for s in self.slots):
                if should_stop is not None and should_stop():
                    return False
                for key, _ in sel.select(timeout=0.1):
                    self._read(key.data, sel)
                if self.go_sent_at is None and all(s.state == "warm" for s in self.slots):
                    check_warmup(self.slots)
                    self._send_go()
                self._check_alive(sel)
                self.merge_parts()
                on_tick()
        self.merge_parts()
        return True

    def _send_go(self) -> None:
        """Every process starts the level's clock at one absolute moment (CLOCK_MONOTONIC, system-wide), far enough
        ahead for each to read the line and start its users: one schedule over the processes, not one per clock."""
        self.go_sent_at = time.monotonic()
        users = max(s.config.users for s in self.slots)
        self.start_ns = time.monotonic_ns() + START_MARGIN_NS + START_PER_USER_NS * users
        for s in self.slots:
            s.proc.send_go(self.start_ns)
            s.state = "running"

    def _read(self, s: Slot, sel: selectors.BaseSelector) -> bool:
        """Handle what the pipe holds; False when it held nothing (or is at its end)."""
        lines = s.proc.read_lines()
        if s.proc.eof and s.proc.stdout_fd in sel.get_map():
            sel.unregister(s.proc.stdout_fd)
        for line in lines:
            self._handle(s, line)
        return bool(lines)

    def _handle(self, s: Slot, line: bytes) -> None:
        try:
            msg = loads(line)
        except ValueError:
            return  # not ours (a library printing to stdout); stderr has the diagnostics
        event = msg.get("event") if isinstance(msg, dict) else None
        if event == "warm":
            s.state, s.warm = "warm", cast(WarmEvent, msg)
        elif event == "progress" and msg.get("phase") == "level":
            s.progress = cast(ProgressEvent, msg)
        elif event == "done":
            s.stats, s.state = cast(DoneEvent, msg).get("stats") or cast(WorkerStats, {}), "done"

    def _check_alive(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for s in self.slots:
            rc = s.proc.returncode()
            if rc is not None and s.state != "done":
                # give the pipe a last read: "done" may sit in it
                while self._read(s, sel):
                    pass
                if not _done(s):
                    raise self.crash(s, f"exited with code {rc}")
            if s.state in ("starting", "running") and now - s.proc.last_seen > HEARTBEAT_TIMEOUT_S:
                raise self.crash(s, f"sent nothing for {HEARTBEAT_TIMEOUT_S:g} s")

    def crash(self, s: Slot, what: str) -> LoadError:
        try:
            # the driver masks what it writes; its copy in the bundle is masked again with the parent's secrets
            s.stderr_copy.write_bytes(redact(s.proc.stderr_since(s.stderr_offset).decode("utf-8", "replace")).encode())
            tail = stderr_tail(s.stderr_copy.read_bytes())
        except OSError:
            tail = "(no stderr captured)"
        return LoadError(
            f"load driver process {s.index} (pid {s.proc.pid}) {what} while {_DOING[s.state]}; "
            f"last stderr lines ({s.stderr_copy}):\n{tail}",
            hint="the driver's full stderr is in the file named above; a traceback there usually names "
                 "the cause (bad base_url, missing package, out of file descriptors)")

    def merge_parts(self) -> None:
        """Append the complete lines that the parts gained since the last call to records.jsonl."""
        parts = [s for s in self.slots if s.part_path is not None]
        if not parts:
            return
        with open(self.records_path, "ab") as out:
            for s in parts:
                assert s.part_path is not None
                try:
                    with open(s.part_path, "rb") as f:
                        f.seek(s.part_offset)
                        chunk = f.read()
                except FileNotFoundError:
                    continue
                end = chunk.rfind(b"\n") + 1
                if end:
                    out.write(chunk[:end])
                    s.part_offset += end


def _done(s: Slot) -> bool:
    return s.state == "done"


def check_warmup(slots: list[Slot]) -> None:
    warm = [s.warm for s in slots if s.warm is not None]
    sent = sum(int(w.get("requests") or 0) for w in warm)
    ok = sum(int(w.get("ok") or 0) for w in warm)
    if sent and not ok:
        first = next((w.get("first_error") for w in warm if w.get("first_error")), "unknown")
        raise LoadError(f"cannot run load level: all {sent} warm-up requests failed (first error: {first})",
                        hint="check the endpoint, the model name and the server's log")


class ProgressRelay:
    """Sums the drivers' progress lines and calls on_progress at most ~4 times a second."""

    def __init__(self, total: int, cb: Callable[[Progress], None] | None, run: LevelRun) -> None:
        self.total, self.cb, self.run = total, cb, run
        self.last_call = 0.0
        self.last: Progress | None = None

    def current(self) -> Progress:
        done = errors = out = 0
        for s in self.run.slots:
            if s.stats is not None:
                done += int(s.stats.get("ok") or 0) + int(s.stats.get("errors") or 0)
                errors += int(s.stats.get("errors") or 0)
                out += int(s.stats.get("out_tokens") or 0)
            elif s.progress is not None:
                done += int(s.progress.get("done") or 0)
                errors += int(s.progress.get("errors") or 0)
                out += int(s.progress.get("out_tokens") or 0)
        start = self.run.go_sent_at
        elapsed = time.monotonic() - start if start is not None else 0.0
        return Progress(done, self.total, errors, out, round(elapsed, 3))

    def tick(self) -> None:
        now = time.monotonic()
        if self.cb is None or self.run.go_sent_at is None or now - self.last_call < PROGRESS_MIN_INTERVAL_S:
            return
        p = self.current()
        if self.last is None or (p.done, p.out_tokens) != (self.last.done, self.last.out_tokens):
            self.last_call, self.last = now, p
            self.cb(p)

    def final(self, result: LevelResult) -> None:
        if self.cb is not None:
            done = result.ok + result.errors
            self.cb(Progress(done, self.total, result.errors, result.out_tokens, result.wall_s))


def finish(spec: LevelSpec, slots: list[Slot], records_path: Path, client_path: Path,
           finished: bool, start_ns: int | None = None) -> LevelResult:
    stats = [s.stats for s in slots if s.stats is not None]
    if finished:
        reasons = assess.assess(stats)
        ok, errors = sum(s["ok"] for s in stats), sum(s["errors"] for s in stats)
        out_tokens = sum(s["out_tokens"] for s in stats)
        wall = max(s["end_wall"] for s in stats) - min(s["start_wall"] for s in stats)
    else:
        reasons = ["level stopped before its end (should_stop): records are partial"]
        ok = errors = out_tokens = 0
        wall = 0.0
        for s in slots:
            p = s.progress
            if p is None:
                continue
            ok += int(p.get("done") or 0) - int(p.get("errors") or 0)
            errors += int(p.get("errors") or 0)
            out_tokens += int(p.get("out_tokens") or 0)
            wall = max(wall, float(p.get("elapsed_s") or 0.0))
    warm = [float(w["wall_s"]) for s in stats if (w := s.get("warmup")) is not None]
    result = LevelResult(records_path, client_path, ok, errors, round(wall, 4), bool(reasons), reasons,
                         processes=len(slots), out_tokens=out_tokens, stopped=not finished,
                         warmup_s=round(max(warm, default=0.0), 4),
                         ttft_client_bound_reasons=assess.assess_ttft(stats) if finished else list(reasons))
    write_client_json(spec, result, stats, client_path, start_ns)
    return result


def write_client_json(spec: LevelSpec, result: LevelResult, stats: list[WorkerStats], path: Path,
                      start_ns: int | None = None) -> None:
    doc = {
        "schema": 1,
        "spec": asdict(spec),
        "processes": result.processes,
        "usable_cores": usable_cores(spec.cpus),
        "ok": result.ok,
        "errors": result.errors,
        "out_tokens": result.out_tokens,
        "wall_s": result.wall_s,
        "tokens_per_s": round(result.out_tokens / result.wall_s, 1) if result.wall_s > 0 else 0.0,
        "stopped": result.stopped,
        "client_bound": result.client_bound,
        "client_bound_reasons": result.client_bound_reasons,
        "timing_warnings": assess.timing_warnings(stats),
        "ttft_client_bound": result.ttft_client_bound,
        "ttft_client_bound_reasons": result.ttft_client_bound_reasons,
        "ttft_client_share_p99_ms": assess.ttft_client_share_ms(stats),
        "thresholds": assess.thresholds(),
        "start_ns": start_ns,
        "workers": stats,
    }
    atomic_write(path, json.dumps(redact_json(doc), indent=1).encode("utf-8"))

