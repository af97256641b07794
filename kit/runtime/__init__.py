"""Runtimes start one arm's server, wait until it is ready, and stop it completely.

Two implementations share this interface: ``kit.runtime.process`` (a subprocess in its own
process group) and ``kit.runtime.docker`` (a container through the Docker SDK). The experiment
loop only sees ``Runtime`` and ``Server``.
"""

from __future__ import annotations

import http.client
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

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
    extra: dict[str, Any] = field(default_factory=dict)

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


@dataclass
class StopInfo:
    """How a server ended: recorded in the bundle."""

    exit_code: int | None
    signal: str | None  # "SIGTERM", "SIGKILL" or None if it had already exited
    stop_s: float  # time from stop request to confirmed gone
    details: dict[str, Any] = field(default_factory=dict)


class Server(Protocol):
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

    def describe(self) -> dict[str, Any]:
        """What to record about it (pid/pgid or container id and inspect output, secrets removed)."""
        ...


class Runtime(Protocol):
    name: str

    def start(self, spec: ServerSpec) -> Server:
        """Start the server; on failure leave nothing behind and raise ServerError."""
        ...

    def describe(self) -> dict[str, Any]:
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


def state_dir() -> Path:
    """Where kit keeps live-server records (for the leftover gate and `kit clean`)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kit" / "servers"


_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes] | None:
    """(status, body) of a GET to a local server, never through a proxy; None when it cannot be asked."""
    try:
        with _NO_PROXY.open(url, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), b""
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return None


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when ``url`` answers 2xx (no proxy: the server is local)."""
    got = http_get(url, timeout)
    return got is not None and 200 <= got[0] < 300
