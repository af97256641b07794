from __future__ import annotations

import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest
from support.bundles import build_bundle, summarize

import kit
from kit.bundle import Bundle
from kit.signing import SigningKey, generate_key


@pytest.fixture(autouse=True)
def stats_standin(monkeypatch: pytest.MonkeyPatch, kit_home: Path) -> types.ModuleType:
    """kit.stats is someone else's module; verification calls kit.stats.summarize_bundle, so stand one in."""
    mod = types.ModuleType("kit.stats")
    mod.summarize_bundle = summarize  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "kit.stats", mod)
    monkeypatch.setattr(kit, "stats", mod, raising=False)
    return mod


@pytest.fixture
def runner(tmp_path: Path) -> SigningKey:
    return generate_key(tmp_path / "keys" / "runner_ed25519", "kit-runner@testhost")


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
