"""Fixtures for the load generator tests."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ._support import SERVER, FakeServer


@pytest.fixture
def sse_server(tmp_path: Path) -> Iterator[Callable[..., FakeServer]]:
    started: list[FakeServer] = []

    def start(ttft_ms: float = 30.0, itl_ms: float = 10.0, *extra: str) -> FakeServer:
        log = tmp_path / f"server-{len(started)}.jsonl"
        cmd = [sys.executable, str(SERVER), "--port", "0", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
               "--log", str(log), *extra]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("LISTENING"), f"server did not start: {line!r}"
        srv = FakeServer(proc, int(line.split()[1]), log)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        if srv.proc.poll() is None:
            srv.proc.terminate()
            try:
                srv.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                srv.kill()
