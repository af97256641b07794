"""What one level asks for (``LevelSpec``), what it gives back (``LevelResult``, ``Progress``), and the
checks and arithmetic made before any driver runs. Standard library only (parent side)."""

from __future__ import annotations

import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from kit.errors import LoadError
from kit.load.arrivals import Arrival, check, count_for
from kit.load.prompts import DIALECTS
from kit.plumbing.affinity import parse_cpulist
from kit.plumbing.redact import secrets_from_env

ENDPOINTS = ("chat", "completions")
STREAMS_PER_PROCESS = 256
WINDOWS = ("all", "steady")
MAX_DURATION_S = 86_400.0


@dataclass(frozen=True)
class LevelSpec:
    base_url: str            # e.g. "http://127.0.0.1:30000"
    endpoint: str            # "chat" -> POST /v1/chat/completions, "completions" -> POST /v1/completions
    model: str               # served model name
    concurrency: int         # exactly this many users, all spawned at once
    requests: int            # budget of recorded requests for this level (shared by all users)
    warmup_requests: int     # sent first at the same concurrency, NOT recorded
    prompt_tokens: int       # prompt length (words; deterministic text from seed)
    output_tokens: int       # max_tokens, with the end of sequence turned off (see ``dialect``)
    seed: int
    request_timeout_s: float
    processes: int           # 0 = auto: one process per ~256 streams, capped by free cores
    tags: dict[str, str | int] = field(default_factory=dict)  # copied into every record
    dialect: str = "sglang"  # request fields for fixed length and usage: kit.load.prompts.DIALECTS
    cpus: str | None = None  # Linux CPU list the driver processes run on (load.cpus); None: wherever kit may
    # when requests go out (kit.load.arrivals): closed loop (``concurrency`` users back to back) or open loop at
    # ``rate`` requests/s (poisson, or gamma with ``burstiness``) with at most ``concurrency`` in flight
    arrival: str = "closed"
    rate: float = 0.0
    burstiness: float = 1.0
    arrival_seed: int = 0
    duration_s: float | None = None  # time-limited level: sends stop after it; ``requests`` is then a ceiling
    window: str = "all"      # "steady": the statistics keep the steady-state window only (client.json's window)

    @property
    def arrivals(self) -> Arrival:
        return Arrival(self.arrival, self.rate, self.burstiness, self.arrival_seed)

    def scheduled(self) -> int:
        """Requests the level sends at most: the budget, or for a time-limited open-loop level rate x duration."""
        if self.duration_s is not None and self.arrivals.open_loop:
            return min(self.requests, count_for(self.arrivals, self.duration_s))
        return self.requests
    # -- workload (kit.workload; owner: workload): what each request carries --
    workload: str | None = None  # a workload file (kit.files.workload): request i is its line i; None: word prompts
    body_fields: dict[str, object] = field(default_factory=dict)  # load.request's body fields
    seed_per_request: bool = False
    headers: dict[str, str] = field(default_factory=dict)     # plain values (they reach client.json)
    header_env: dict[str, str] = field(default_factory=dict)  # header -> variable name; its value never leaves env
    secret_env: list[str] = field(default_factory=list)  # server.pass_env's names: the drivers mask their values too
    ca_bundle: str | None = None  # https: CA certificates (PEM) to verify the server with; None: the system's
    verify_tls: bool = True


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
    warmup_s: float = 0.0        # the warm-up requests' wall time (the slowest driver's), not recorded
    # why the client's own share of TTFT p99 may exceed 5 ms (kit.load.assess.assess_ttft): no TTFT verdict
    ttft_client_bound_reasons: list[str] = field(default_factory=list)

    @property
    def ttft_client_bound(self) -> bool:
        return bool(self.client_bound or self.ttft_client_bound_reasons)


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    errors: int
    out_tokens: int
    elapsed_s: float


def usable_cores(cpus: str | None = None) -> int:
    """CPUs the load may use: the pinned list's size, else this process's affinity."""
    if cpus:
        return len(parse_cpulist(cpus))
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def auto_processes(concurrency: int, cores: int | None = None) -> int:
    cores = usable_cores() if cores is None else cores
    return max(1, min(math.ceil(concurrency / STREAMS_PER_PROCESS), max(1, cores - 1)))


def process_count(spec: LevelSpec) -> int:
    """How many driver processes the level uses."""
    n = spec.processes or auto_processes(spec.concurrency, usable_cores(spec.cpus))
    return max(1, min(n, spec.concurrency, spec.scheduled()))


def split(total: int, n: int) -> list[int]:
    return [total // n + (1 if i < total % n else 0) for i in range(n)]


def validate(spec: LevelSpec) -> None:
    problems = []
    if spec.endpoint not in ENDPOINTS:
        problems.append(f"endpoint {spec.endpoint!r} is not one of {', '.join(ENDPOINTS)}")
    if spec.dialect not in DIALECTS:
        problems.append(f"dialect {spec.dialect!r} is not one of {', '.join(DIALECTS)}")
    for name in ("concurrency", "requests", "prompt_tokens", "output_tokens"):
        if getattr(spec, name) < 1:
            problems.append(f"{name} must be >= 1 (got {getattr(spec, name)})")
    if spec.warmup_requests < 0 or spec.processes < 0:
        problems.append("warmup_requests and processes must be >= 0")
    if spec.request_timeout_s <= 0:
        problems.append(f"request_timeout_s must be > 0 (got {spec.request_timeout_s})")
    problems += check(spec.arrivals)
    if spec.window not in WINDOWS:
        problems.append(f"window {spec.window!r} is not one of {', '.join(WINDOWS)}")
    if spec.duration_s is not None and not 0 < spec.duration_s <= MAX_DURATION_S:
        problems.append(f"duration_s must be in (0, {MAX_DURATION_S:g}] (got {spec.duration_s})")
    problems += workload_problems(spec)
    url = urlsplit(spec.base_url)
    if url.scheme not in ("http", "https") or not url.hostname:
        problems.append(f"base_url {spec.base_url!r} is not an http:// or https:// URL")
    if spec.ca_bundle is not None and not os.path.isfile(spec.ca_bundle):
        problems.append(f"ca_bundle {spec.ca_bundle} is not a file")
    if problems:
        raise LoadError("cannot run load level: " + "; ".join(problems),
                        hint="fix the level's settings in the experiment manifest")


def workload_problems(spec: LevelSpec) -> list[str]:
    """The workload file must hold every index the level sends; a secret header's variable must be set."""
    problems = []
    if spec.workload is not None:
        try:
            with open(spec.workload, "rb") as f:
                lines = sum(1 for _ in f)
        except OSError as exc:
            lines = 0
            problems.append(f"cannot read the workload file {spec.workload} ({exc})")
        if lines and lines < spec.requests + spec.warmup_requests:
            problems.append(f"the workload file {spec.workload} holds {lines} requests, the level sends "
                            f"{spec.requests + spec.warmup_requests}")
    secrets_from_env(spec.secret_env)  # (kit.plumbing.redact) for the parent's own messages and files
    secrets_from_env(spec.header_env.values(), headers=True)
    for name, env in spec.header_env.items():
        value = os.environ.get(env)
        if value is None:
            problems.append(f"header {name} needs the environment variable {env}, which is not set")
        elif any(c in value for c in "\r\n\0"):
            problems.append(f"the environment variable {env} (header {name}) holds a line break")
    return problems


def preflight(base_url: str) -> None:
    url = urlsplit(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=5.0):
            pass
    except OSError as exc:
        raise LoadError(f"cannot run load level: cannot connect to {base_url} ({exc})",
                        hint="is the server up and listening on that address?") from exc
