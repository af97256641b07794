"""End-to-end runs of `kit run` with the real engine, the real load generator and real files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Own config (runner key) and state (server records) directories for every run."""
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    yield env
