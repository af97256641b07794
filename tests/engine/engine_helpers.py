"""Helpers for the embedded engine tests: a real ``python -m kit.engine`` subprocess over real HTTP."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
READY = "kit-engine ready on http://"
#: A small model that starts fast; routing behaves like the default one.
SMALL = ["--experts", "16", "--top-k", "4", "--layers", "2", "--hidden", "64", "--expert-ffn", "64",
         "--vocab", "256"]


class EngineProcess:
    """A running engine: ``url``, helpers for HTTP calls, and ``stop()``."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kit.engine", "--host", "127.0.0.1", "--port", "0", *args],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=self._log, text=True,
        )
        self.url = self._wait_ready(timeout=60.0)

    def _wait_ready(self, timeout: float) -> str:
        lines: queue.Queue[str] = queue.Queue()
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=0.2)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            if line.startswith(READY):
                return "http://" + line[len(READY):].strip()
        self.stop()
        raise RuntimeError(f"engine did not start; log:\n{self.log_path.read_text()}")

    def stop(self, timeout: float = 10.0) -> float:
        """SIGTERM and wait; return how long the exit took."""
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return time.monotonic() - t0

    # ---------------------------------------------------------------------------------------- http

    def request(self, method: str, path: str, body: Any = None, raw: bytes | None = None,
                timeout: float = 30.0) -> tuple[int, dict[str, str], bytes]:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), err.read()

    def post_json(self, path: str, body: Any) -> tuple[int, Any]:
        status, _, data = self.request("POST", path, body)
        return status, json.loads(data)

    def stream(self, path: str, body: dict[str, Any], timeout: float = 60.0) -> list[Any]:
        """POST with ``stream: true``; the decoded SSE payloads (``"[DONE]"`` kept as a string)."""
        status, headers, data = self.request("POST", path, {**body, "stream": True}, timeout=timeout)
        assert status == 200, data
        assert headers["Content-Type"].startswith("text/event-stream")
        return parse_sse(data)

    def metrics(self) -> dict[str, float]:
        _, _, data = self.request("GET", "/metrics")
        return parse_metrics(data.decode())


def parse_sse(data: bytes) -> list[Any]:
    """The payloads of ``data:`` events."""
    events: list[Any] = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text → {sample name with labels: value}."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out
