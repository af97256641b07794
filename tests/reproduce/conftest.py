"""Signed bundles for the reproduce tests: real files, real keys, real signatures (``support.bundles``), with
simulated records (enough cells for the equivalence tests) and the server commands a process-runtime run records."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from support.bundles import ArmModel, BundleSpec, build_bundle

from kit.bundle import Bundle, sign_provenance
from kit.signing import SigningKey, generate_key

SPEC = BundleSpec(arms={"base": ArmModel(), "oea": ArmModel()}, repeats=4, levels=(1, 4), requests=32,
                  cell_sd=0.01, cell_level_sd=0.005, server_metrics=True)
ENGINE = ["/usr/bin/python3", "-m", "kit.engine", "--host", "127.0.0.1", "--port", "18080"]


@pytest.fixture(autouse=True)
def _home(kit_home: Path) -> Path:
    """Every test here has its own ~/.config/kit: nothing of the user's trust counts."""
    return kit_home


@pytest.fixture
def runner(tmp_path: Path) -> SigningKey:
    return generate_key(tmp_path / "keys" / "runner_ed25519", "kit-runner@testhost")


@pytest.fixture
def trust_file(tmp_path: Path, runner: SigningKey) -> Path:
    p = tmp_path / "trust" / "allowed_signers"
    p.parent.mkdir(exist_ok=True)
    p.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    return p


SignedBundle = Callable[..., Bundle]


@pytest.fixture
def signed_bundle(tmp_path: Path, runner: SigningKey) -> SignedBundle:
    """A signed bundle of SPEC (changed by ``changes``), each cell's server.json holding its argv: the engine
    command, plus ``--oea-k0 <k0>`` for the oea arm."""
    def make(results: str = "results", k0: str = "4", **changes: object) -> Bundle:
        spec = BundleSpec(**{**SPEC.__dict__, **changes})  # type: ignore[arg-type]
        b = build_bundle(tmp_path / results, runner, sign=False, spec=spec)
        for d in sorted(b.path("cells").iterdir()):
            arm = d.name.rsplit("-r", 1)[0]
            argv = [*ENGINE, *(["--oea-k0", k0] if arm == "oea" else [])]
            b.write_json(f"cells/{d.name}/server.json", {"schema_version": 1, "command": argv, "pid": 1})
        sign_provenance(b, runner, predicate={"internalParameters": {"runtime": "process"},
                                              "metadata": {"startedOn": "2025-01-01T00:00:00Z"}})
        return b

    return make
