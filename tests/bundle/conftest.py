from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.bundles import build_bundle

from kit.bundle import Bundle
from kit.signing import SigningKey, generate_key


@pytest.fixture(autouse=True)
def _home(kit_home: Path) -> Path:
    """Every bundle test runs with its own KIT_HOME (verification reads the user's trust file from it)."""
    return kit_home


@pytest.fixture
def stranger(tmp_path: Path) -> SigningKey:
    return generate_key(tmp_path / "keys" / "stranger_ed25519", "mallory@elsewhere")


def trust_line(key: SigningKey, principal: str = "runner", namespaces: str = "kit-bundle") -> str:
    return f'{principal} namespaces="{namespaces}" {key.public_line()}\n'


@pytest.fixture
def trust_file(tmp_path: Path, runner: SigningKey) -> Path:
    p = tmp_path / "trust" / "allowed_signers"
    p.parent.mkdir()
    p.write_text(trust_line(runner))
    return p


@pytest.fixture
def make_bundle(tmp_path: Path, runner: SigningKey) -> Callable[..., Bundle]:
    def make(**kw: object) -> Bundle:
        return build_bundle(tmp_path / "results", runner, **kw)  # type: ignore[arg-type]

    return make


@pytest.fixture
def bundle(make_bundle: Callable[..., Bundle]) -> Bundle:
    return make_bundle()
