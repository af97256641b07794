"""`kit verify`: one entry point for manifests (signatures) and bundles (integrity + provenance)."""

from __future__ import annotations

from pathlib import Path

from kit.bundle.verify import VerifyResult, verify_bundle
from kit.errors import UsageError
from kit.manifest import project_root, read_bytes
from kit.signing import default_trust_files, verify_manifest

__all__ = ["VerifyResult", "verify_target"]


def verify_target(target: Path, trust: list[Path]) -> VerifyResult:
    if not target.exists():
        raise UsageError(f"{target}: no such file or directory",
                         hint="give a signed manifest, a bundle directory or a bundle archive (.tar.gz)")
    if target.is_dir() or target.name.endswith((".tar.gz", ".tgz")):
        return verify_bundle(target, trust)
    raw = read_bytes(target)
    files = trust or default_trust_files(target, project_root(target))
    mt = verify_manifest(target, raw, files)
    who = ", ".join(f"{p} ({fp}, trusted by {src})" for p, fp, src in mt.signers)
    return VerifyResult(summary=f"signed by {who}", details=dict(mt.as_dict()))
