"""Parent side of the process split: start driver processes, relay their JSON lines, stop them cleanly.

Standard library only; never imports locust or gevent (see ``kit.load``).
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import kit
from kit.errors import LoadError

KIT_ROOT = str(Path(kit.__file__).resolve().parent.parent)
DRIVER_MODULE = "kit.load.driver"
HEARTBEAT_TIMEOUT_S = 60.0
KILL_GRACE_S = 3.0


@dataclass
class Worker:
    index: int
    config_path: Path
    stderr_path: Path
    part_path: Path | None             # a records part to merge, or None when it writes records.jsonl
    proc: subprocess.Popen[bytes] | None = None
    stderr: IO[bytes] | None = None
    buf: bytes = b""
    last_seen: float = field(default_factory=time.monotonic)
    state: str = "starting"            # starting -> warm -> running -> done
    warm: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    stats: dict[str, Any] | None = None
    part_offset: int = 0
    eof: bool = False


def stderr_tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_bytes()[-8000:].decode("utf-8", "replace")
    except OSError:
        return "(no stderr captured)"
    tail = text.strip().splitlines()[-lines:]
    return "\n".join(tail) if tail else "(stderr empty)"


class DriverGroup:
    """Runs the driver processes of one level and tears them down whatever happens."""

    def __init__(self, workers: list[Worker], records_path: Path) -> None:
        self.workers = workers
        self.records_path = records_path
        self.sel = selectors.DefaultSelector()
        self.go_sent_at: float | None = None

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = KIT_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        for w in self.workers:
            w.stderr = open(w.stderr_path, "wb")  # noqa: SIM115 - closed in kill()
            w.proc = subprocess.Popen(
                [sys.executable, "-m", DRIVER_MODULE, str(w.config_path)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=w.stderr, env=env,
                start_new_session=True, close_fds=True)
            assert w.proc.stdout is not None
            os.set_blocking(w.proc.stdout.fileno(), False)
            self.sel.register(w.proc.stdout, selectors.EVENT_READ, w)
            w.last_seen = time.monotonic()

    def kill(self) -> None:
        """Stop every driver still alive (SIGTERM to its process group, then SIGKILL); idempotent."""
        alive = [w for w in self.workers if w.proc is not None and w.proc.poll() is None]
        for w in alive:
            _signal_group(w, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        for w in alive:
            assert w.proc is not None
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(w, signal.SIGKILL)
                w.proc.wait()
        for w in self.workers:
            if w.proc is not None:
                for stream in (w.proc.stdin, w.proc.stdout):
                    with contextlib.suppress(OSError):
                        if stream is not None:
                            stream.close()
            if w.stderr is not None:
                w.stderr.close()
                w.stderr = None
        self.sel.close()

    # --- the loop ----------------------------------------------------------------------------------
    def run(self, on_warm: Callable[[list[Worker]], None], on_tick: Callable[[], None],
            should_stop: Callable[[], bool] | None) -> bool:
        """Drive the level to the end; return False when ``should_stop`` ended it early."""
        while any(w.state != "done" for w in self.workers):
            if should_stop is not None and should_stop():
                return False
            for key, _ in self.sel.select(timeout=0.1):
                self._read(key.data)
            if self.go_sent_at is None and all(w.state == "warm" for w in self.workers):
                on_warm(self.workers)
                self._send_go()
            self._check_alive()
            self.merge_parts()
            on_tick()
        self.merge_parts()
        return True

    def _send_go(self) -> None:
        self.go_sent_at = time.monotonic()
        for w in self.workers:
            assert w.proc is not None and w.proc.stdin is not None
            w.proc.stdin.write(b"go\n")
            w.proc.stdin.flush()
            w.state = "running"
            w.last_seen = time.monotonic()

    def _read(self, w: Worker) -> bool:
        """Read what the pipe holds; False when it held nothing (or is at its end)."""
        assert w.proc is not None and w.proc.stdout is not None
        if w.eof:
            return False
        try:
            data = os.read(w.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return False
        if not data:
            w.eof = True
            self.sel.unregister(w.proc.stdout)
            return False
        w.last_seen = time.monotonic()
        w.buf += data
        *lines, w.buf = w.buf.split(b"\n")
        for line in lines:
            if line.strip():
                self._handle(w, line)
        return True

    def _handle(self, w: Worker, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return  # not ours (a library printing to stdout); stderr has the diagnostics
        event = msg.get("event")
        if event == "warm":
            w.state, w.warm = "warm", msg
        elif event == "progress" and msg.get("phase") == "level":
            w.progress = msg
        elif event == "done":
            w.stats, w.state = msg.get("stats") or {}, "done"

    def _check_alive(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            assert w.proc is not None
            rc = w.proc.poll()
            if rc is not None and w.state != "done":
                # give the pipe a last read: "done" may sit in it
                while self._read(w):
                    pass
                if w.state != "done":
                    raise self.crash(w, f"exited with code {rc}")
            if w.state in ("starting", "running") and now - w.last_seen > HEARTBEAT_TIMEOUT_S:
                raise self.crash(w, f"sent nothing for {HEARTBEAT_TIMEOUT_S:g} s")

    def crash(self, w: Worker, what: str) -> LoadError:
        pid = w.proc.pid if w.proc is not None else "?"
        if w.stderr is not None:
            w.stderr.flush()
        return LoadError(
            f"load driver process {w.index} (pid {pid}) {what} while {w.state}; "
            f"last stderr lines ({w.stderr_path}):\n{stderr_tail(w.stderr_path)}",
            hint="the driver's full stderr is in the file named above; a traceback there usually names "
                 "the cause (bad base_url, missing package, out of file descriptors)")

    # --- records -----------------------------------------------------------------------------------
    def merge_parts(self) -> None:
        """Append the complete lines that the parts gained since the last call to records.jsonl."""
        parts = [w for w in self.workers if w.part_path is not None]
        if not parts:
            return
        with open(self.records_path, "ab") as out:
            for w in parts:
                assert w.part_path is not None
                try:
                    with open(w.part_path, "rb") as f:
                        f.seek(w.part_offset)
                        chunk = f.read()
                except FileNotFoundError:
                    continue
                end = chunk.rfind(b"\n") + 1
                if end:
                    out.write(chunk[:end])
                    w.part_offset += end


def _signal_group(w: Worker, sig: int) -> None:
    assert w.proc is not None
    try:
        os.killpg(w.proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError):
            w.proc.send_signal(sig)
