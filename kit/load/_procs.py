"""Parent side of the process split: one driver process, kept alive across the levels of a session.

Standard library only; never imports locust or gevent (see ``kit.load``). Each process runs in its own
process group and is stopped through ``kit.plumbing.procs.stop_group``.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import kit
from kit.load.messages import LevelCommand
from kit.plumbing.procs import stop_group

KIT_ROOT = str(Path(kit.__file__).resolve().parent.parent)
DRIVER_MODULE = "kit.load.driver"
KILL_GRACE_S = 3.0
EXIT_WAIT_S = 2.0    # for an idle driver to leave on its own once its stdin is closed


def driver_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = KIT_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def stderr_tail(data: bytes, lines: int = 15) -> str:
    tail = data[-8000:].decode("utf-8", "replace").strip().splitlines()[-lines:]
    return "\n".join(tail) if tail else "(stderr empty)"


class DriverProcess:
    """``python -m kit.load.driver --session``: runs one level per ``send_level``, exits at end of input."""

    def __init__(self, stderr_path: Path) -> None:
        self.stderr_path = stderr_path
        self.stderr: IO[bytes] | None = open(stderr_path, "ab")  # noqa: SIM115 - closed in stop()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", DRIVER_MODULE, "--session"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=driver_env(),
                start_new_session=True, close_fds=True)
        except BaseException:
            self.stderr.close()
            raise
        assert self.proc.stdout is not None
        self.stdout_fd = self.proc.stdout.fileno()
        os.set_blocking(self.stdout_fd, False)
        self.levels = 0          # levels sent to it
        self.buf = b""
        self.eof = False
        self.last_seen = time.monotonic()
        self.stopped = False

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def returncode(self) -> int | None:
        return self.proc.poll()

    # --- talking to it ------------------------------------------------------------------------------
    def send_level(self, config: dict[str, object]) -> None:
        cmd: LevelCommand = {"cmd": "level", "config": config}
        self.levels += 1
        self.last_seen = time.monotonic()
        self._write(json.dumps(cmd).encode() + b"\n")

    def send_go(self, start_ns: int | None = None) -> None:
        """Start the level; ``start_ns``: the common start every process counts its schedule from (monotonic ns)."""
        self.last_seen = time.monotonic()
        self._write(b"go\n" if start_ns is None else f"go {start_ns}\n".encode())

    def _write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # it died: the level's liveness check names the exit code and quotes its stderr

    def read_lines(self) -> list[bytes]:
        """The complete lines its stdout holds now (none at its end, after which ``eof`` is set)."""
        if self.eof:
            return []
        try:
            data = os.read(self.stdout_fd, 65536)
        except BlockingIOError:
            return []
        if not data:
            self.eof = True
            return []
        self.last_seen = time.monotonic()
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        return [line for line in lines if line.strip()]

    def drop_pending(self) -> None:
        """Forget unread output (between levels a clean driver has said all it had to say)."""
        while self.read_lines():
            pass
        self.buf = b""

    # --- its stderr, kept for the whole session ------------------------------------------------------
    def stderr_size(self) -> int:
        if self.stderr is not None:
            self.stderr.flush()
        try:
            return self.stderr_path.stat().st_size
        except OSError:
            return 0

    def stderr_since(self, offset: int) -> bytes:
        try:
            with open(self.stderr_path, "rb") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return b""

    # --- the end -----------------------------------------------------------------------------------
    def close_input(self) -> None:
        """End of input: an idle driver exits on its own."""
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError, ValueError):
                self.proc.stdin.close()

    def stop(self, grace_s: float = KILL_GRACE_S) -> None:
        """Stop the whole process group (SIGTERM, grace, SIGKILL), reap it, close the pipes; idempotent."""
        if self.stopped:
            return
        self.close_input()
        stop_group(self.proc.pid, grace_s, reap=self.proc.poll)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=KILL_GRACE_S)
        if self.proc.stdout is not None:
            with contextlib.suppress(OSError):
                self.proc.stdout.close()
        if self.stderr is not None:
            self.stderr.close()
            self.stderr = None
        self.stopped = True
