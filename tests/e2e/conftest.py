"""End-to-end runs of `kit run` with the real engine, the real load generator and real files."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Own config (runner key) and state (server records) directories for every run, and no Docker engine.

    These runs use the process runtime, whose leftover-container gate asks Docker for *any* running container
    labelled ``kit.run`` and refuses to start a cell while one is up. On a machine where the docker tier (of
    this session, still removing its containers, or of another one) runs at the same time, every cell here
    would then fail its "before" gate. Pointing DOCKER_HOST at a socket that does not exist makes the gate
    report "skipped: Docker not reachable", as on a machine without Docker; the gate itself is tested with a
    fake Docker in tests/gates and against the real engine in tests/docker. KIT_LOCK_DIR: the test's own
    reservation directory (tests/conftest.py), named here for the runs of tests that build their own environment.
    """
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "KIT_LOCK_DIR": os.environ["KIT_LOCK_DIR"]}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env
