"""Signed bundles for the reproduce tests: real files, real keys, real signatures (``support.bundles``), with
simulated records (enough cells for the equivalence tests) and the server commands a process-runtime run records."""

from __future__ import annotations

import gzip
import io
import tarfile
from collections.abc import Callable
from pathlib import Path

from support.bundles import ArmModel, BundleSpec, build_bundle

from kit.bundle import Bundle, sign_provenance
from kit.signing import SigningKey

SPEC = BundleSpec(arms={"base": ArmModel(), "oea": ArmModel()}, repeats=4, levels=(1, 4), requests=32,
                  cell_sd=0.01, cell_level_sd=0.005, server_metrics=True)
ENGINE = ["/usr/bin/python3", "-m", "kit.engine", "--host", "127.0.0.1", "--port", "18080"]


def signed(results: Path, runner: SigningKey, k0: str = "4", **changes: object) -> Bundle:
    """A signed bundle of SPEC (changed by ``changes``) under ``results``, each cell's server.json holding its argv:
    the engine command, plus ``--oea-k0 <k0>`` for the oea arm."""
    spec = BundleSpec(**{**SPEC.__dict__, **changes})  # type: ignore[arg-type]
    b = build_bundle(results, runner, sign=False, spec=spec)
    for d in sorted(b.path("cells").iterdir()):
        arm = d.name.rsplit("-r", 1)[0]
        argv = [*ENGINE, *(["--oea-k0", k0] if arm == "oea" else [])]
        b.write_json(f"cells/{d.name}/server.json", {"schema_version": 1, "command": argv, "pid": 1})
    sign_provenance(b, runner, predicate={"internalParameters": {"runtime": "process"},
                                          "metadata": {"startedOn": "2025-01-01T00:00:00Z"}})
    return b


def rewrite_member(tar_gz: Path, member: str, edit: Callable[[bytes], bytes]) -> None:
    """Rewrite the archive ``tar_gz`` with ``member``'s bytes edited (its size must stay), as a tool other than kit
    could: `kit archive` writes only a bundle whose files are what its provenance signed."""
    with tarfile.open(tar_gz, "r:gz") as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None)  # type: ignore[union-attr]
                   for m in src.getmembers()]
    with gzip.open(tar_gz, "wb") as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m, data in members:
            if m.name == member and data is not None:
                data = edit(data)
                assert len(data) == m.size, "the edit must keep the member's size"
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
