"""Sealing a reproduction: the source's files copied into ``source/``, and the provenance signed again with the run's
own parameters plus the source bundle, named by the sha256 of its provenance (``externalParameters.reproduces`` and
a ``resolvedDependencies`` entry ``kit-bundle:<experiment>/<run id>``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.bundle import PROVENANCE, Bundle
from kit.bundle.verify import read_envelope
from kit.files import JsonObject
from kit.files.reproduce import SourceRef

SOURCE_DIR = "source"
#: What the verdict and the setup diff are read from, copied byte for byte: the provenance names each one's sha256.
SOURCE_FILES = (PROVENANCE, "summary.json", "run.json", "plan.json", "environment.json", "images.json")


def copy_source(src_root: Path, bundle: Bundle) -> list[str]:
    """The source's files (those it has) into ``source/`` of the new bundle; returns what was copied."""
    copied = []
    for name in SOURCE_FILES:
        p = src_root / name
        if p.is_file():
            bundle.write_bytes(f"{SOURCE_DIR}/{name}", p.read_bytes())
            copied.append(f"{SOURCE_DIR}/{name}")
    return copied


@dataclass(frozen=True)
class Pieces:
    """The caller's pieces of the run's signed predicate, as ``kit.bundle.sign_provenance`` takes them."""

    external: JsonObject
    internal: JsonObject
    dependencies: list[Any]
    metadata: JsonObject

    def with_source(self, ref: SourceRef, flags: JsonObject) -> JsonObject:
        """The pieces with the source bundle named (and the flags as run.json now records them)."""
        source = {"bundle": ref.top, "run_id": ref.run_id, "experiment": ref.experiment, "path": ref.path,
                  "kind": ref.kind, "provenance": {"sha256": ref.provenance_sha256},
                  "trusted": ref.trusted, "allow_untrusted_source": ref.allow_untrusted_source}
        if ref.archive_sha256:
            source["archive"] = {"sha256": ref.archive_sha256}
        dependency = {"uri": f"kit-bundle:{ref.experiment}/{ref.run_id}", "name": f"{ref.top}/{PROVENANCE}",
                      "digest": {"sha256": ref.provenance_sha256},
                      "annotations": {"role": "reproduced source bundle", "manifest_sha256": ref.manifest_sha256}}
        deps = [d for d in self.dependencies if not (isinstance(d, dict) and str(d.get("uri", "")).startswith(
            "kit-bundle:"))]
        return {"externalParameters": {**self.external, "flags": flags, "reproduces": source},
                "internalParameters": self.internal, "resolvedDependencies": [*deps, dependency],
                "metadata": self.metadata}


def _dict(v: object) -> JsonObject:
    return dict(v) if isinstance(v, dict) else {}


def predicate(bundle: Bundle) -> Pieces:
    """The pieces of the bundle's current provenance (verified by the caller), to sign them again."""
    _, _, stmt = read_envelope(bundle.path(PROVENANCE), str(bundle.root))
    pred = _dict(stmt.get("predicate"))
    build = _dict(pred.get("buildDefinition"))
    deps = build.get("resolvedDependencies")
    return Pieces(external=_dict(build.get("externalParameters")), internal=_dict(build.get("internalParameters")),
                  dependencies=list(deps) if isinstance(deps, list) else [],
                  metadata=_dict(_dict(pred.get("runDetails")).get("metadata")))
