"""Helpers for the load generator tests: a real streaming SSE server in a subprocess, specs, records."""

from __future__ import annotations

import json
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.load import LevelSpec

SERVER = Path(__file__).resolve().parents[2] / "benchmarks" / "sse_server.py"


@dataclass
class FakeServer:
    proc: subprocess.Popen[str]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def requests(self) -> list[dict[str, Any]]:
        """The server's own log (one line per finished request), read once it is stopped or idle."""
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


def make_spec(base_url: str, **overrides: Any) -> LevelSpec:
    fields: dict[str, Any] = {
        "base_url": base_url, "endpoint": "chat", "model": "fake-model", "concurrency": 4, "requests": 12,
        "warmup_requests": 3, "prompt_tokens": 24, "output_tokens": 16, "seed": 7, "request_timeout_s": 30.0,
        "processes": 1, "tags": {"arm": "A", "repeat": 2, "level": 4},
    }
    fields.update(overrides)
    return LevelSpec(**fields)


def read_records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
