"""One load-generating process: ``python -m kit.load.driver --session`` (started by ``kit.load.LoadSession``),
or ``python -m kit.load.driver CONFIG.json`` for one level, then exit.

``import locust`` must come first in this process: it monkey-patches the standard library with gevent,
and crashes when ``requests``/``urllib3``/``docker`` were imported before it. Nothing else may import
this module (nor ``driver_stream``/``driver_monitor``).

Started once per session, the process imports Locust once and then runs levels one after another, each
on a command line from the parent (``{"cmd": "level", "config": {...}}``, a ``DriverConfig``); end of
input makes it exit. Each level is independent of the ones before it: fresh connections, users, Locust
runner, counters and self-monitoring (CPU is measured as the difference over the level). For each level:

1. builds the deterministic request bodies, creates a Locust ``LocalRunner``;
2. warm-up: ``runner.start(users, users)`` against a budget of ``warmup_requests`` tickets; nothing is
   recorded; prints ``{"event": "warm", ...}``;
3. with ``wait_for_go``, blocks until the parent writes ``go <start_ns>`` on stdin: the level's common start
   (CLOCK_MONOTONIC ns), so that several processes count their schedules from one moment;
4. the level: the same users against ``requests`` tickets; each finished request is one JSON line in
   ``records_path``, written and flushed at once; ``{"event": "progress", ...}`` every
   ``progress_interval_s``;
5. prints ``{"event": "done", "stats": {...}}`` (the self-monitoring that ends up in ``client.json``).

Each user owns one keep-alive connection (a geventhttpclient ``ConnectionPool`` of size 1), kept from the
warm-up into the level (``kit.load.driver_stream`` reads the streams).
"""

from __future__ import annotations

import locust  # noqa: F401  (the first import of the process: gevent monkey-patching)

# isort: split
import gc
import json
import logging
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import gevent
from geventhttpclient.connectionpool import ConnectionPool
from locust import User, constant, task
from locust.env import Environment
from locust.exception import StopUser

from kit.load._config import DriverConfig
from kit.load.driver_monitor import Monitor, RecordWriter, cpu_seconds
from kit.load.driver_phase import Phase
from kit.load.driver_stream import Streamer
from kit.load.messages import WarmupInfo, WorkerStats
from kit.load.selfstats import delay_stats, first_read_stats, gap_stats, inter_chunk_gaps, lag_stats
from kit.plumbing.jsontypes import loads
from kit.plumbing.redact import RedactingWriter, secrets_from_env

perf_ns = time.perf_counter_ns
log = logging.getLogger("kit.load.driver")


def emit(event: str, **fields: object) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def raise_nofile(want: int = 65536) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def make_user_class(streamer: Streamer, base_url: str) -> type[User]:
    class StreamUser(User):
        host = base_url
        wait_time = constant(0)

        pool: ConnectionPool | None = None
        start_index: int | None = None  # this user's place in the level's start order until its first request

        def on_start(self) -> None:
            # connections outlive the user: the level's users reuse the warm-up's connections
            self.pool = streamer.pools.pop() if streamer.pools else streamer.new_pool()
            self.start_index = streamer.phase.users_spawned
            streamer.phase.users_spawned += 1

        def on_stop(self) -> None:
            if self.pool is not None:
                streamer.pools.append(self.pool)
                self.pool = None

        @task
        def one_request(self) -> None:
            ticket = streamer.budget.take()
            if ticket is None:
                raise StopUser()
            first, self.start_index = self.start_index, None
            ended: int | None = None
            try:
                assert self.pool is not None
                ended = streamer.dispatch(self.pool, ticket, first, streamer.budget.freed_ns)
            finally:
                streamer.budget.release(ended)

    return StreamUser


def heartbeat(cfg: DriverConfig, streamer: Streamer) -> None:
    """Progress of the current phase, every ``progress_interval_s``; the parent's watchdog needs it."""
    while True:
        gevent.sleep(cfg.progress_interval_s)
        ph = streamer.phase
        emit("progress", worker=cfg.worker, phase=ph.name, done=ph.ok + ph.errors, errors=ph.errors,
             out_tokens=ph.out_tokens, elapsed_s=round((perf_ns() - ph.t0) / 1e9, 3))


class Driver:
    """One level in this process: its users, connections, Locust runner and counters."""

    def __init__(self, cfg: DriverConfig) -> None:
        self.cfg = cfg
        self.streamer = Streamer(cfg)
        user_class = make_user_class(self.streamer, cfg.base_url)
        self.env = Environment(user_classes=[user_class], host=cfg.base_url, stop_timeout=None)
        self.runner = self.env.create_local_runner()

    def close(self) -> None:
        """Stop the runner's greenlets, the stream reader and the connections."""
        self.runner.quit()
        self.streamer.close()

    def run_phase(self, n: int, deadline: int | None = None, spawned: Callable[[], None] | None = None) -> float:
        """Run ``n`` tickets with all users spawned at once (no ticket after ``deadline``; ``spawned`` called once
        every user exists); return the wall time."""
        budget = self.streamer.budget
        budget.reset(n, deadline)
        t0 = time.perf_counter()
        if n:
            self.runner.start(self.cfg.users, spawn_rate=self.cfg.users)
            if spawned is not None:
                if self.runner.spawning_greenlet is not None:
                    self.runner.spawning_greenlet.join()
                spawned()
            budget.finished.wait()
            if self.runner.spawning_greenlet is not None:
                self.runner.spawning_greenlet.join()
            # every user ends itself (StopUser) once the tickets are gone; let the group drop them
            self.runner.user_greenlets.join(timeout=10)
            self.runner.stop()
        return time.perf_counter() - t0

    def warmup(self) -> WarmupInfo:
        cfg = self.cfg
        ph = Phase("warmup", f"w{cfg.worker}-warm-", cfg.warmup_index_offset, None, {})
        self.streamer.phase = ph
        wall = self.run_phase(cfg.warmup_requests)
        return {"requests": cfg.warmup_requests, "ok": ph.ok, "errors": ph.errors, "wall_s": round(wall, 3),
                "first_error": ph.first_error, "mean_e2e_ns": ph.e2e_sum_ns // ph.ok if ph.ok else 0}

    def level(self, warm_e2e_ns: int, start_ns: int | None = None) -> WorkerStats:
        """The level; ``warm_e2e_ns``: the warm-up's mean E2E (0: none), one request's lifetime, which the steady
        window's ramp lasts (closed loop: the users' first requests are spread over it); ``start_ns``: the common
        start of the level's processes (CLOCK_MONOTONIC ns; None: this process's own clock starts it)."""
        cfg = self.cfg
        sink = RecordWriter(cfg.records_path)
        ph = Phase("level", f"w{cfg.worker}-", cfg.index_offset, sink, dict(cfg.tags))
        ph.schedule, ph.indices = cfg.schedule_ns, cfg.schedule_index
        if ph.schedule is not None:
            ph.go.clear()  # set by start() below, once every user exists
        if cfg.window == "steady" and ph.schedule is None and cfg.users > 1:
            ph.stagger_ns = warm_e2e_ns // cfg.users
        self.streamer.phase = ph
        monitor = Monitor(cfg)
        # keep the long-lived objects out of the collector's way during the level. What is frozen stays
        # frozen in a session (a level's runner, users and connections, a few hundred kB), so that this
        # collect only walks what the previous level of the process left, not the whole heap again
        gc.collect()
        gc.freeze()
        cpu0 = cpu_seconds()
        ph.t0 = perf_ns()
        common = None if start_ns is None else start_ns - monotonic_minus_perf_ns()  # on the records' clock
        skew: list[int] = []

        def start() -> None:
            """The level's clock starts: at the common start (closed loop: this process waits for it; open loop:
            the schedule is due from it, users spawned before it); without one, now (open loop: once every user
            exists, so that spawning many users makes no request late); a time-limited level ends duration_s
            later. A process ready only after the common start keeps it (its first sends are late, recorded as
            lateness) and reports by how much it missed it (``start_skew_ns``)."""
            ready = perf_ns()
            if common is not None and ph.schedule is None and ready < common:
                gevent.sleep((common - ready) / 1e9)
            ph.t0 = ready if common is None else common
            skew.append(max(0, ready - ph.t0))
            if cfg.duration_s is not None:
                ph.deadline = ph.t0 + round(cfg.duration_s * 1e9)
                if ph.schedule:  # open loop: the schedule ends at the duration; a send held past it is dropped
                    ph.deadline = max(ph.deadline, ph.t0 + ph.schedule[-1])
            ph.go.set()

        if ph.schedule is None:
            start()
        monitor.start()
        try:
            self.run_phase(cfg.requests, None if ph.schedule is not None else ph.deadline,
                           start if ph.schedule is not None else None)
            cpu = cpu_seconds() - cpu0
            end_wall, wall = time.time(), (perf_ns() - ph.t0) / 1e9  # the level's span: from its clock's start
            start_wall = end_wall - wall
        finally:
            monitor.stop()
            sink.close()
        stats = self._stats(ph, monitor, sink, wall, cpu, start_wall, end_wall)
        clock = {"t0_ns": ph.t0, "start_skew_ns": skew[0] if skew and common is not None else None}
        return cast(WorkerStats, {**stats, **clock, **schedule_stats(ph, cfg, warm_e2e_ns)})

    def _stats(self, ph: Phase, mon: Monitor, sink: RecordWriter, wall: float, cpu: float, start_wall: float,
               end_wall: float) -> WorkerStats:
        windows = sorted(mon.cpu_windows)
        return {
            "worker": self.cfg.worker, "pid": os.getpid(), "users": self.cfg.users,
            "requests": self.cfg.requests, "ok": ph.ok, "errors": ph.errors, "first_error": ph.first_error,
            "out_tokens": ph.out_tokens, "usage_completion_tokens": ph.usage_tokens,
            "wall_s": round(wall, 4), "start_wall": start_wall, "end_wall": end_wall,
            "cpu_s": round(cpu, 4), "cpu_share": round(cpu / wall, 4) if wall > 0 else 0.0,
            "cpu_window_s": self.cfg.cpu_sample_interval_s,
            "cpu_window_share_max": round(windows[-1], 4) if windows else None,
            "cpu_window_share_p50": round(windows[len(windows) // 2], 4) if windows else None,
            "cpu_us_per_token": round(cpu / ph.out_tokens * 1e6, 2) if ph.out_tokens else None,
            "tokens_per_s": round(ph.out_tokens / wall, 1) if wall > 0 else 0.0,
            "lag": lag_stats(mon.lag_ns),
            "itl": gap_stats(inter_chunk_gaps(sink.offsets, sink.lengths)),
            "first_read": first_read_stats(ph.first_read_lag_ns),
        }


def schedule_stats(ph: Phase, cfg: DriverConfig, warm_e2e_ns: int) -> dict[str, object]:
    """When this process's requests went out against when they were due, and its steady-state window.

    The window (``load.window: steady``; times are perf ns like the records' ``t_start_ns``) keeps a request
    when it was sent at or after ``start_ns`` and at or before ``end_ns``, whatever its outcome; the level runs
    until every request sent has ended, so all of them are measured (``kit.files.records.steady_window``). The
    ramp is over once every user has sent its first request (closed loop, the users' starts spread over one
    warm-up E2E) or one warm-up E2E after the start (open loop: an empty server has filled by then); the window
    ends at the last send, after which the load only falls (the drain).
    """
    sends = len(ph.late_ns)
    out: dict[str, object] = {"lateness": delay_stats(ph.late_ns), "unsent": ph.unsent}
    if ph.schedule is not None:
        out["queue"] = delay_stats(ph.queue_ns)
        out["scheduled"] = len(ph.schedule)
        end = ph.schedule[-1] if ph.schedule else 0
        out["offered_rate"] = round(len(ph.schedule) / (end / 1e9), 4) if end > 0 else None
    # the rate achieved: requests sent over the time from the level's start to the last send (open loop: the
    # schedule's last request is due at count / rate, so on time this is the rate asked for)
    last = ph.last_send_ns
    out["sent_rate"] = round(sends / ((last - ph.t0) / 1e9), 4) if last is not None and last > ph.t0 else None
    if cfg.window == "steady" and last is not None:
        start = ph.t0 + warm_e2e_ns if ph.schedule is not None else ph.ramp_end_ns
        out["window"] = {"start_ns": last if start is None else start, "end_ns": last,
                         "ramp_ns": warm_e2e_ns, "stagger_ns": ph.stagger_ns}
    return out


def monotonic_minus_perf_ns() -> int:
    """0 where perf_counter is CLOCK_MONOTONIC (Linux): the parent's start is then exact on the records' clock."""
    if time.get_clock_info("perf_counter").implementation == time.get_clock_info("monotonic").implementation:
        return 0
    return time.monotonic_ns() - perf_ns()


def watch_parent(on_orphan: Callable[[], None]) -> None:
    parent = os.getppid()
    while True:
        gevent.sleep(0.5)
        if os.getppid() != parent:
            on_orphan()


def wait_for_go() -> int | None:
    """The parent's "go" line; its number, when it has one, is the level's common start (monotonic ns)."""
    line = sys.stdin.readline()  # blocks the whole process on purpose: nothing else runs now
    if not line:
        raise SystemExit("parent went away before the level started")
    parts = line.split()
    return int(parts[1]) if len(parts) == 2 and parts[1].isdigit() else None


def run_level(cfg: DriverConfig, nofile: int) -> None:
    """Warm-up, (wait for go), level, ``done``; everything the level started is stopped at its end."""
    # the secrets this process masks in what it writes (kit.plumbing.redact): the values of the variables named, read
    # here from its environment (the config names them, it never holds a value)
    secrets_from_env(cfg.secret_env)
    secrets_from_env(cfg.header_env.values(), headers=True)
    if nofile < cfg.users + 64:
        log.warning("RLIMIT_NOFILE is %d, below %d users + margin", nofile, cfg.users)
    driver = Driver(cfg)
    beat = gevent.spawn(heartbeat, cfg, driver.streamer)
    try:
        warm = driver.warmup()
        emit("warm", worker=cfg.worker, **warm)
        start_ns = wait_for_go() if cfg.wait_for_go else None
        emit("start", worker=cfg.worker)
        stats = driver.level(int(warm.get("mean_e2e_ns") or 0), start_ns)
        stats["rlimit_nofile"] = nofile
        stats["warmup"] = warm
    except BaseException:
        beat.kill()
        driver.close()
        raise
    beat.kill()
    emit("done", worker=cfg.worker, stats=stats)
    driver.close()  # after "done": the parent writes the level's files meanwhile


def serve(nofile: int) -> int:
    """The session loop: one level per command line on stdin, until end of input."""
    while True:
        line = sys.stdin.readline()  # idle between levels: nothing else needs to run
        if not line:
            return 0
        if not line.strip():
            continue
        cmd = loads(line)
        if cmd.get("cmd") != "level":
            raise SystemExit(f"unknown command from the parent: {line.strip()[:200]}")
        run_level(DriverConfig(**cmd["config"]), nofile)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kit.load.driver (--session | CONFIG.json)", file=sys.stderr)
        return 2
    sys.stderr = RedactingWriter(sys.stderr)  # tracebacks and warnings too may quote what a server sent
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("locust.runners").setLevel(logging.ERROR)  # "spawn rate > 100" is intended
    # the record writer thread takes the GIL in slices of at most 0.5 ms while the loop is busy
    sys.setswitchinterval(0.0005)
    nofile = raise_nofile()
    gevent.spawn(watch_parent, lambda: os._exit(3))
    if argv[0] == "--session":
        return serve(nofile)
    run_level(DriverConfig.read(Path(argv[0])), nofile)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
