"""`kit clean` where the configured Docker engine does not answer (DOCKER_HOST at a socket nothing listens on): it still stops
the process-runtime leftovers it can see, says what it did, and then exits 5 naming DOCKER_HOST and the fix: it
never reports a clean host whose containers it could not look at. With no Docker configured at all (no
DOCKER_HOST, no default socket) there is nothing to look at; that case is `docker_expected() is None`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from gate_helpers import write_record

from kit.cleanup import docker_expected

ROOT = Path(__file__).resolve().parents[2]


def _dead_socket(tmp_path: Path) -> Path:
    """A unix socket file nothing listens on (an engine that died): connecting is refused."""
    path = tmp_path / "dead.sock"
    if not path.exists():
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.bind(str(path))
    return path


def _clean(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "KIT_LOCK_DIR": str(tmp_path / "locks"),
           "DOCKER_HOST": f"unix://{_dead_socket(tmp_path)}", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kit", "clean", *args], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path, check=False)


def test_clean_with_a_dead_docker_host_cleans_processes_then_fails_naming_it(state_home: Path,
                                                                             tmp_path: Path) -> None:
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        record = write_record(state_home, server.pid, run_id="dead-run")  # its kit is gone: a leftover
        r = _clean(tmp_path)
        assert server.wait(timeout=30) is not None  # stopped by kit clean, before it gave up on Docker
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert r.returncode == 5, r.stdout + r.stderr
    assert "server process groups stopped: 1" in r.stdout and not record.exists()
    assert "containers NOT checked: 1" in r.stdout
    assert f"DOCKER_HOST=unix://{tmp_path}/dead.sock does not answer" in r.stderr
    assert "set DOCKER_HOST" in r.stderr and "Traceback" not in r.stderr
    j = _clean(tmp_path, "--json")  # --json: the same exit, the JSON on stdout first
    assert j.returncode == 5 and json.loads(j.stdout)["docker_unreachable"][0].startswith("DOCKER_HOST=unix://")


def test_docker_expected_names_docker_host_else_the_default_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:1")
    assert docker_expected() == "DOCKER_HOST=tcp://127.0.0.1:1"
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")  # no engine can be there
    assert docker_expected() is None
    monkeypatch.delenv("DOCKER_HOST")
    assert docker_expected() == ("/var/run/docker.sock" if os.path.exists("/var/run/docker.sock") else None)
