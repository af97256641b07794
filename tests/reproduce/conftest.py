"""Fixtures of the reproduce tests: their own ~/.config/kit, a runner key, a policy trusting it, signed bundles."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from reproduce_helpers import signed

from kit.bundle import Bundle
from kit.signing import SigningKey

SignedBundle = Callable[..., Bundle]


@pytest.fixture(autouse=True)
def _home(kit_home: Path) -> Path:
    """Every test here has its own ~/.config/kit: nothing of the user's trust counts."""
    return kit_home


@pytest.fixture
def trust_file(tmp_path: Path, runner: SigningKey) -> Path:
    p = tmp_path / "trust" / "allowed_signers"
    p.parent.mkdir(exist_ok=True)
    p.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    return p


@pytest.fixture
def signed_bundle(tmp_path: Path, runner: SigningKey) -> SignedBundle:
    def make(results: str = "results", k0: str = "4", **changes: object) -> Bundle:
        return signed(tmp_path / results, runner, k0, **changes)

    return make
