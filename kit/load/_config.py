"""The JSON handed from ``run_level`` to one driver process (pure Python, both sides use it)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kit.plumbing.jsontypes import loads


@dataclass(frozen=True)
class DriverConfig:
    worker: int                 # process index, 0-based
    base_url: str
    endpoint: str               # "chat" | "completions"
    model: str
    users: int                  # this process's share of the concurrency
    requests: int               # this process's share of the recorded budget
    warmup_requests: int        # this process's share of the warm-up
    index_offset: int           # global index of this process's first recorded request (prompt choice)
    warmup_index_offset: int    # same for warm-up requests (a range disjoint from recorded ones)
    prompt_tokens: int
    output_tokens: int
    seed: int
    request_timeout_s: float
    records_path: str
    tags: dict[str, str | int] = field(default_factory=dict)
    dialect: str = "sglang"     # how fixed length and usage are asked for (kit.load.prompts.fixed_length_fields)
    # the workload (kit.workload): request i is line i of workload_path; None: the legacy word prompts
    workload_path: str | None = None
    body_fields: dict[str, object] = field(default_factory=dict)  # load.request's fields in every body
    seed_per_request: bool = False
    headers: dict[str, str] = field(default_factory=dict)  # plain header values
    header_env: dict[str, str] = field(default_factory=dict)  # header -> environment variable (secret values)
    secret_env: list[str] = field(default_factory=list)  # more variables whose values are masked (server.pass_env)
    ca_bundle: str | None = None  # https (kit.load.driver_tls)
    verify_tls: bool = True
    wait_for_go: bool = False   # block after the warm-up until the parent writes "go" on stdin
    # open loop (kit.load.arrivals): this process's due times (ns after the level's start) and the global request
    # index of each (its prompt); None: closed loop
    schedule_ns: list[int] | None = None
    schedule_index: list[int] | None = None
    duration_s: float | None = None  # time-limited level: no request sent after this (requests is a ceiling)
    window: str = "all"         # "steady": spread the users' starts, report the steady-state window
    progress_interval_s: float = 0.25
    lag_probe_interval_s: float = 0.01
    cpu_sample_interval_s: float = 0.5

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1), encoding="utf-8")

    @classmethod
    def read(cls, path: Path) -> DriverConfig:
        return cls(**loads(path.read_text(encoding="utf-8")))
