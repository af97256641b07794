"""Runtimes start one arm's server, wait until it is ready, and stop it completely.

Two implementations share this interface: ``kit.runtime.process`` (a subprocess in its own
process group) and ``kit.runtime.docker`` (a container through the Docker SDK). The experiment
loop only sees ``Runtime`` and ``RunningServer``; live-server records are in ``kit.runtime.records``.
"""

from __future__ import annotations

import os
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NotRequired, Protocol, TypedDict

from kit.plumbing.jsontypes import JsonObject
from kit.plumbing.logpump import LOG_LIMIT_BYTES
from kit.plumbing.redact import add_secrets, redact, secret_forms, secrets_from_env
from kit.plumbing.tls import TlsClient

SECRET_NAME_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
# What a process-runtime server inherits from kit's environment (when set): nothing else, kit's own
# KIT_* variables least of all. The manifest's env, pass_env and what the runtime sets come on top.
BASE_ENV_NAMES: tuple[str, ...] = ("PATH", "HOME", "LANG", "TMPDIR", "TZ", "USER")
BASE_ENV_PREFIXES: tuple[str, ...] = ("LC_",)


@dataclass(frozen=True)
class RankSpec:
    """One rank of a server that spans nodes (runtime slurm): which node it runs on and its command."""

    rank: int
    host: str  # the node's name in the allocation (rank 0: the first node, where kit runs)
    command: list[str]


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
    gpu_mode: str = "nvidia"  # how docker passes them: nvidia, cdi, devices (kit.runtime.docker.gpus)
    driver_dir: str | None = None  # gpu_mode devices: the driver's folder (None: discovered)
    shm_size: str | None = None
    ipc_host: bool = False
    model_mount: tuple[str, str] | None = None  # (host path, container path), read-only
    dump_mount: tuple[str, str] | None = None  # (host path, container path), read-write: expert_pass's dump folder
    extra: dict[str, object] = field(default_factory=dict)  # docker options: "ulimits", "mem_limit"
    cpus: str | None = None  # Linux CPU list the server runs on (server.cpus), or anywhere
    ranks: tuple[RankSpec, ...] = ()  # runtime slurm: one per node, rank 0's command is ``command``
    tls: TlsClient | None = None  # server.scheme https: how kit verifies it (None: http)
    log_limit_bytes: int = LOG_LIMIT_BYTES  # server.log_limit_mb: the most each log of the server keeps

    @property
    def scheme(self) -> str:
        return "http" if self.tls is None else "https"

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        if ":" in host:
            host = f"[{host}]"
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """What every https request of kit's own to this server is verified with (None: http)."""
        return None if self.tls is None else self.tls.context()

    def __post_init__(self) -> None:
        add_secrets(self.secret_env.values())  # whatever kit holds a spec of, every redaction masks

    def redact(self, text: str) -> str:
        """``text`` with every secret (this spec's and every other kit holds) masked: kit.plumbing.redact.redact."""
        return redact(text)


class ProcessStopDetails(TypedDict):
    """How a process-runtime server group ended (merged into the cell's stop record)."""

    pgid: int
    port_free_after_stop: bool
    group_members_left: list[int]
    log_bytes: int  # what server.log holds (server.log_limit_mb bounds it)
    log_dropped_bytes: int  # the server's output left out of it (0: none)
    escaped_group: NotRequired[list[str]]  # processes that left the group (setsid) holding its output, stopped
    log_error: NotRequired[str]  # what ended its log early: a failing pipe, or a reader cut at the stop (LogPump)


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
    log_dropped_bytes: int
    log_error: str | None
    removed: bool


class RankStop(TypedDict):
    """How one rank of a server that spans nodes ended."""

    rank: int
    node: str
    step_id: str | None  # JOB.STEP as the controller knew it (None: not found, its srun was signalled)
    exit_code: int | None
    signal: str | None  # "SIGTERM" (scancel --signal=TERM), "SIGKILL" (the step cancelled), None: had ended
    log_bytes: NotRequired[int]  # what its log holds, and the output left out of it (server.log_limit_mb)
    log_dropped_bytes: NotRequired[int]
    log_error: NotRequired[str]  # what ended its log early (LogPump.error), as ProcessStopDetails.log_error


class RanksStopDetails(TypedDict):
    """How a server of runtime slurm ended: every rank, and any srun process left on kit's node (none)."""

    job_id: str
    ranks: list[RankStop]
    srun_left: list[int]


StopDetails = ProcessStopDetails | ContainerStopDetails | RanksStopDetails


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
    cpus: str | None  # server.cpus as asked
    cpus_allowed: str | None  # the kernel's Cpus_allowed_list of the leader once started (the proof)
    cgroup: str | None  # the cgroup it and all it starts run in (kit.plumbing.cgroups); None: none
    cgroup_note: str  # why it has none ("" when it has one)


class ContainerDescription(TypedDict):
    """server.json of a docker-runtime server (inspect output with secrets replaced by ***)."""

    runtime: Literal["docker"]
    container_id: str
    name: str
    image: str | None
    secret_env_names: list[str]
    gpu_mode: str  # nvidia, cdi or devices (server.docker_gpus.mode)
    gpus_seen: JsonObject | None  # what nvidia-smi in the container listed, against what was asked for
    inspect: JsonObject


class RankDescription(TypedDict):
    rank: int
    node: str
    step_name: str  # the job step's name (srun --job-name)
    srun_pid: int  # the srun process on kit's node
    command: list[str]
    log: str  # its log in the cell's directory


class RanksDescription(TypedDict):
    """server.json of a server of runtime slurm: one rank per node, each a job step."""

    runtime: Literal["slurm"]
    job_id: str
    container: str  # "none" or "pyxis"
    container_image: str | None
    env: dict[str, str]
    secret_env_names: list[str]
    ranks: list[RankDescription]


ServerDescription = ProcessDescription | ContainerDescription | RanksDescription


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
    """The user's values of the pass-through variables (missing ones are skipped), added to the secrets that
    every redaction masks (kit.plumbing.redact)."""
    return secrets_from_env(pass_env, environ)


def base_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The part of kit's environment a process-runtime server inherits: PATH, HOME, LANG, LC_*, TMPDIR,
    TZ and USER, when set. Everything else (kit's KIT_* variables, tokens, agents' sockets) stays out."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if k in BASE_ENV_NAMES or k.startswith(BASE_ENV_PREFIXES)}


def server_environment(spec: ServerSpec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A process-runtime server's whole environment: the base above, the manifest's env (with what the
    runtime sets: GPUs), the pass_env values, and PYTHONUNBUFFERED."""
    # PYTHONSAFEPATH: `python -m x` / `python script` never import from the working directory first (a planted
    # kit/ or sitecustomize.py there would run instead of the signed command's code)
    return {**base_environment(environ), **spec.env, **spec.secret_env, "PYTHONUNBUFFERED": "1",
            "PYTHONSAFEPATH": "1"}


def redact_env(env: dict[str, str], secret_names: set[str] | None = None) -> dict[str, str]:
    """A copy safe to record: secret names and names that look secret get '***'."""
    names = secret_names or set()
    return {k: ("***" if k in names or SECRET_NAME_RE.search(k) else v) for k, v in env.items()}


TAIL_BYTES = 64 * 1024  # how much of a log's end ``tail_lines`` reads
TAIL_LINE_CHARS = 1000  # a longer line is cut (one progress bar without a newline must not fill an error)
NOTE_CHARS = 160  # the log line an error's first line quotes


def tail_lines(path: Path, n: int = 40) -> list[str]:
    """The last ``n`` lines of a log file (empty if missing), as a terminal shows them: lines end at a newline
    only, a carriage return (progress bars) keeps what was written after the last one, a line cut by the read's
    start is dropped, and each line is cut to TAIL_LINE_CHARS."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            data = f.read()
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", "replace").split("\n")
    if size > TAIL_BYTES and len(lines) > 1:
        lines = lines[1:]  # it began mid-line
    if lines and lines[-1] == "":
        lines.pop()  # after the last newline
    shown = [line.rstrip("\r").rsplit("\r", 1)[-1] for line in lines[-n:]]
    return [line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS] + " [...]" for line in shown]


def log_note(lines: list[str], mentioning: str = "") -> str:
    """' (log: LINE)' with the last non-empty line of ``lines`` (the last that mentions ``mentioning``, when one
    does), cut short: for an error's first line, the one a run's summary and progress show."""
    kept = [line.strip() for line in lines if line.strip()]
    line = next((ln for ln in reversed(kept) if mentioning and mentioning in ln), kept[-1] if kept else "")
    if not line:
        return " (the log is empty)"
    return f" (log: {line[:NOTE_CHARS]}{'...' if len(line) > NOTE_CHARS else ''})"


__all__ = [
    "BASE_ENV_NAMES",
    "BASE_ENV_PREFIXES",
    "SECRET_NAME_RE",
    "ContainerDescription",
    "ContainerStopDetails",
    "ProcessDescription",
    "ProcessStopDetails",
    "RankDescription",
    "RankSpec",
    "RankStop",
    "RanksDescription",
    "RanksStopDetails",
    "RunningServer",
    "Runtime",
    "ServerDescription",
    "ServerSpec",
    "StopDetails",
    "StopInfo",
    "base_environment",
    "log_note",
    "redact_env",
    "secret_env_from",
    "secret_forms",
    "server_environment",
    "tail_lines",
]
