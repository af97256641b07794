"""Fixtures for the transformers tests (helpers live in hf_helpers.py)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest
from hf_helpers import MODEL_DIR


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny-cpu model (seed 0, float32), made once per session in a temporary directory, shared by the
    pytest-xdist workers (the base temp's parent is theirs in common; a flock lets one make it while the others
    wait): each worker made its own before, 14 s of CPU each on this 2-core machine. Tests never write into it."""
    pytest.importorskip("transformers", reason="transformers is not installed (make test installs the test extras)")
    from kit_hf.make_model import make_model

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    out = shared / "hf-tiny-model"
    with open(shared / "hf-tiny-model.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = shared / "hf-tiny-model.made"  # beside it: the tests compare the model's own files
        if not made.exists():
            make_model("tiny-cpu", out, seed=0, force=True)
            made.touch()
    return out


@pytest.fixture(scope="session")
def shipped_model() -> Path:
    """The model the shipped CPU manifest names (build/models/transformers-tiny-cpu), made when missing."""
    pytest.importorskip("transformers", reason="transformers is not installed (make test installs the test extras)")
    from kit_hf.make_model import make_model

    make_model("tiny-cpu", MODEL_DIR, seed=0, force=True)  # kept as it is when already made with these args
    return MODEL_DIR


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Own config (runner key) and state directories, and no Docker engine (as tests/e2e's ``isolated``:
    the process runtime's leftover-container gate then says "Docker not reachable")."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env
