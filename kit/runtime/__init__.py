"""Runtimes start one arm's server, wait until it is ready, and stop it completely.

Two implementations share this interface: ``kit.runtime.process`` (a subprocess in its own
process group) and ``kit.runtime.docker`` (a container through the Docker SDK). The experiment
loop only sees ``Runtime`` and ``RunningServer``; live-server records are in ``kit.runtime.records``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, TypedDict

from kit.plumbing.jsontypes import JsonObject

SECRET_NAME_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)


@dataclass(frozen=True)
class ServerSpec:
    """Everything needed to start one arm's server for one cell (placeholders already resolved)."""

    name: str  # unique per run and cell, e.g. "kit-demo-3f2a-baseline-r1"
    arm: str
    command: list[str]
    env: dict[str, str]  # non-secret environment (recorded in the bundle)
    secret_env: dict[str, str] = field(repr=False)  # passed through, never recorded or logged
    host: str  # address the port is bound (process) or published (docker) on
    port: int
    readiness_path: str
    ready_timeout_s: float
    stop_grace_s: float
    log_path: Path  # server stdout+stderr go here, secrets redacted
    labels: dict[str, str]  # kit.run, kit.experiment, kit.arm, kit.repeat, kit.cell
    # docker only
    image: str | None = None
    container_port: int | None = None
    gpus: list[str] | Literal["all"] | None = None  # GPU UUIDs/indices, "all", or none
    shm_size: str | None = None
    ipc_host: bool = False
    model_mount: tuple[str, str] | None = None  # (host path, container path), read-only
    extra: dict[str, object] = field(default_factory=dict)  # docker options: "ulimits", "mem_limit"

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    def redact(self, text: str) -> str:
        """Replace every secret value in ``text`` with ***."""
        for value in sorted(self.secret_env.values(), key=len, reverse=True):
            if value:
                text = text.replace(value, "***")
        return text


class ProcessStopDetails(TypedDict):
    """How a process-runtime server group ended (merged into the cell's stop record)."""

    pgid: int
    port_free_after_stop: bool
    group_members_left: list[int]


class ContainerStopDetails(TypedDict, total=False):
    """How a container ended: its final state, and proof that it was removed."""

    container_id: str
    removed_before_stop: bool
    status: str | None
    oom_killed: bool
    error: str | None
    started_at: str | None
    finished_at: str | None
    log_bytes: int
    log_error: str | None
    removed: bool


StopDetails = ProcessStopDetails | ContainerStopDetails


@dataclass
class StopInfo:
    """How a server ended: recorded in the bundle."""

    exit_code: int | None
    signal: str | None  # "SIGTERM", "SIGKILL" or None if it had already exited
    stop_s: float  # time from stop request to confirmed gone
    details: StopDetails = field(default_factory=ContainerStopDetails)


class ProcessDescription(TypedDict):
    """server.json of a process-runtime server."""

    runtime: Literal["process"]
    pid: int
    pgid: int
    command: list[str]
    env: dict[str, str]
    secret_env_names: list[str]
    inherited_env_names: list[str]
    cwd: str


class ContainerDescription(TypedDict):
    """server.json of a docker-runtime server (inspect output with secrets replaced by ***)."""

    runtime: Literal["docker"]
    container_id: str
    name: str
    image: str | None
    secret_env_names: list[str]
    inspect: JsonObject


ServerDescription = ProcessDescription | ContainerDescription


class RunningServer(Protocol):
    """A started server. ``stop`` is idempotent and always leaves nothing behind."""

    spec: ServerSpec

    def wait_ready(self) -> float:
        """Block until the readiness path answers 200; return seconds waited.

        Raises ServerError (with exit code and last log lines) when the server exits or the
        deadline passes.
        """
        ...

    def check_alive(self) -> None:
        """Raise ServerError with the exit code and last log lines if the server has died."""
        ...

    def stop(self) -> StopInfo: ...

    def describe(self) -> ServerDescription:
        """What to record about it (pid/pgid or container id and inspect output, secrets removed)."""
        ...




class Runtime(Protocol):
    name: str

    def start(self, spec: ServerSpec) -> RunningServer:
        """Start the server; on failure leave nothing behind and raise ServerError."""
        ...

    def describe(self) -> Mapping[str, object]:
        """The runtime's own environment (e.g. Docker engine version) for the bundle."""
        ...


def secret_env_from(pass_env: list[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """The user's values of the pass-through variables (missing ones are skipped)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in pass_env if k in env}


def redact_env(env: dict[str, str], secret_names: set[str] | None = None) -> dict[str, str]:
    """A copy safe to record: secret names and names that look secret get '***'."""
    names = secret_names or set()
    return {k: ("***" if k in names or SECRET_NAME_RE.search(k) else v) for k, v in env.items()}


def tail_lines(path: Path, n: int = 40) -> list[str]:
    """The last ``n`` lines of a log file (empty if missing)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except FileNotFoundError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-n:]


__all__ = [
    "SECRET_NAME_RE",
    "ContainerDescription",
    "ContainerStopDetails",
    "ProcessDescription",
    "ProcessStopDetails",
    "RunningServer",
    "Runtime",
    "ServerDescription",
    "ServerSpec",
    "StopDetails",
    "StopInfo",
    "redact_env",
    "secret_env_from",
    "tail_lines",
]
