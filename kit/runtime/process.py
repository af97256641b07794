"""The process runtime: a server command as a subprocess in its own process group.

Start: the command runs in a new session (so its process group is its own), stdout and stderr
go to the cell's log (secrets redacted), and a record of the group is written to ``state_dir()``
so that a later run's leftover gate and `kit clean` can find it if kit itself dies.
Stop: SIGTERM to the whole group, a grace period, SIGKILL, then proof: no process of the
group remains and the port can be bound again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from kit.errors import ServerError
from kit.runtime import ServerSpec, StopInfo, http_ok, redact_env, state_dir, tail_lines


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _group_members(pgid) != []


def _group_members(pgid: int) -> list[int]:
    """Live (non-zombie) PIDs whose process group is ``pgid``."""
    from kit.gates.procinfo import group_members

    return group_members(pgid)


def boot_id() -> str | None:
    """This boot's id: a record from an earlier boot names process groups that no longer exist."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def port_bindable(host: str, port: int) -> bool:
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


class _LogPump(threading.Thread):
    """Copies the child's output to the log file line by line, redacting secrets."""

    def __init__(self, src: IO[bytes], log_path: Path, spec: ServerSpec) -> None:
        super().__init__(daemon=True, name=f"log-{spec.name}")
        self.src = src
        self.log_path = log_path
        self.spec = spec

    def run(self) -> None:
        with self.log_path.open("ab") as out:
            for line in iter(self.src.readline, b""):
                text = line.decode("utf-8", "replace")
                out.write(self.spec.redact(text).encode())
                out.flush()


class ProcessServer:
    def __init__(self, spec: ServerSpec, proc: subprocess.Popen[bytes], record: Path, pump: _LogPump) -> None:
        self.spec = spec
        self.proc = proc
        self.pgid = proc.pid
        self.record = record
        self.pump = pump
        self.started = time.monotonic()
        self._stopped: StopInfo | None = None

    def _died(self, what: str) -> ServerError:
        code = self.proc.poll()
        self.pump.join(timeout=2)
        tail = "\n".join(f"    {line}" for line in tail_lines(self.spec.log_path, 30))
        return ServerError(
            f"server for {self.spec.arm} ({self.spec.name}) {what} with exit code {code}; last log lines:\n{tail}",
            hint=f"full log: {self.spec.log_path}",
        )

    def wait_ready(self) -> float:
        url = self.spec.base_url + self.spec.readiness_path
        deadline = self.started + self.spec.ready_timeout_s
        delay = 0.05
        while True:
            if self.proc.poll() is not None:
                raise self._died("exited during start-up")
            if http_ok(url):
                return time.monotonic() - self.started
            if time.monotonic() > deadline:
                tail = "\n".join(f"    {line}" for line in tail_lines(self.spec.log_path, 30))
                raise ServerError(
                    f"server for {self.spec.arm} not ready at {url} after {self.spec.ready_timeout_s:g} s; "
                    f"last log lines:\n{tail}",
                    hint="raise server.ready_timeout_s if it is just slow, or check the log",
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise self._died("died")

    def stop(self) -> StopInfo:
        if self._stopped is not None:
            return self._stopped
        t0 = time.monotonic()
        sent: str | None = None
        if _group_alive(self.pgid):
            sent = "SIGTERM"
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pgid, signal.SIGTERM)
            deadline = t0 + self.spec.stop_grace_s
            while _group_alive(self.pgid) and time.monotonic() < deadline:
                self.proc.poll()
                time.sleep(0.02)
            if _group_alive(self.pgid):
                sent = "SIGKILL"
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pgid, signal.SIGKILL)
        code = self.proc.wait(timeout=30)
        kill_deadline = time.monotonic() + 10
        while _group_alive(self.pgid) and time.monotonic() < kill_deadline:
            time.sleep(0.02)
        left = _group_members(self.pgid)
        self.pump.join(timeout=5)
        port_free = port_bindable(self.spec.host, self.spec.port)
        if left:
            raise ServerError(
                f"process group {self.pgid} of {self.spec.name} still has processes {left} after SIGKILL",
                hint=f"kill -KILL -- -{self.pgid}",
            )
        with contextlib.suppress(FileNotFoundError):
            self.record.unlink()
        self._stopped = StopInfo(
            exit_code=code,
            signal=sent,
            stop_s=round(time.monotonic() - t0, 4),
            details={"pgid": self.pgid, "port_free_after_stop": port_free, "group_members_left": left},
        )
        return self._stopped

    def describe(self) -> dict[str, Any]:
        return {
            "runtime": "process",
            "pid": self.proc.pid,
            "pgid": self.pgid,
            "command": self.spec.command,
            "env": redact_env(self.spec.env),
            "secret_env_names": sorted(self.spec.secret_env),
            # the server also inherits kit's environment: its names (values may be secrets) for the record
            "inherited_env_names": sorted(set(os.environ) - set(self.spec.env) - set(self.spec.secret_env)),
            "cwd": os.getcwd(),
        }


class ProcessRuntime:
    name = "process"

    def start(self, spec: ServerSpec) -> ProcessServer:
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **spec.env, **spec.secret_env, "PYTHONUNBUFFERED": "1"}
        try:
            proc = subprocess.Popen(
                spec.command,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as e:
            raise ServerError(
                f"cannot start server for {spec.arm}: {spec.command[0]}: {e.strerror or e}",
                hint="check server.command (or the arm's command) in the manifest",
            ) from None
        try:
            assert proc.stdout is not None
            pump = _LogPump(proc.stdout, spec.log_path, spec)
            pump.start()
            record = state_dir() / f"{proc.pid}.json"
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(json.dumps({
                "pgid": proc.pid, "pid": proc.pid, "run_id": spec.labels.get("kit.run"),
                "cell": spec.labels.get("kit.cell"), "command": spec.command,
                "started": datetime.now(UTC).isoformat(), "boot_id": boot_id(),
            }))
        except BaseException:
            # nothing may outlive a failed start, not even when the record cannot be written
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        return ProcessServer(spec, proc, record, pump)

    def describe(self) -> dict[str, Any]:
        return {"runtime": "process"}


def kill_leftover_groups(grace_s: float = 5.0) -> tuple[list[str], list[str]]:
    """Stop every process-runtime server group recorded in state_dir() (live ones: SIGTERM, grace,
    SIGKILL) and drop the records. Returns (stopped groups, stale records removed)."""
    stopped: list[str] = []
    stale: list[str] = []
    directory = state_dir()
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
        try:
            doc = json.loads(path.read_text())
            pgid = int(doc["pgid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if doc.get("boot_id") not in (None, boot_id()) or not _group_alive(pgid):
            path.unlink(missing_ok=True)
            stale.append(f"{path.name} (group {pgid} already gone)")
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if _group_alive(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        path.unlink(missing_ok=True)
        command = " ".join(doc.get("command", []))[:80]
        stopped.append(f"group {pgid} (run {doc.get('run_id')}, cell {doc.get('cell')}): {command}")
    return stopped, stale
