"""Fixtures for the gate tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from gate_helpers import FakeDocker


@pytest.fixture
def no_docker() -> FakeDocker:
    """A reachable Docker with no container running."""
    return FakeDocker()


@pytest.fixture
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty XDG_STATE_HOME; yields the kit servers directory inside it."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    d = tmp_path / "state" / "kit" / "servers"
    d.mkdir(parents=True)
    yield d
