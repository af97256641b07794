from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from support.ports import free_port

if TYPE_CHECKING:
    from kit.signing import SigningKey

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


@pytest.fixture
def root() -> Path:
    return ROOT


@pytest.fixture
def port() -> int:
    """A port outside the ephemeral range, free now (see support.ports)."""
    return free_port()


@pytest.fixture
def runner(tmp_path: Path) -> SigningKey:
    """A fresh runner key (signs bundles' provenance) under the test's tmp dir."""
    from kit.signing import generate_key

    return generate_key(tmp_path / "keys" / "runner_ed25519", "kit-runner@testhost")


@pytest.fixture
def kit_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Isolate ~/.config/kit so tests never read or write the user's keys and trust files."""
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    yield home
