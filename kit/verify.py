"""`kit verify`: one entry point for manifests (signatures) and bundles (integrity + provenance).

Both answer "signed by whom, and does my policy allow that key here?": the policy is the files given with
--trust, else the user's own trust file; never a file found beside or above what is checked."""

from __future__ import annotations

from pathlib import Path

from kit.bundle.verify import VerifyResult, verify_bundle
from kit.errors import UsageError
from kit.images.context import image_contexts
from kit.manifest import load_manifest, read_bytes
from kit.reproduce.looks import check_reproduce_looks
from kit.signing import check_contexts, policy_files, verify_manifest

__all__ = ["VerifyResult", "verify_target"]


def verify_target(target: Path, trust: list[Path], *, integrity_only: bool = False) -> VerifyResult:
    if not target.exists():
        raise UsageError(f"{target}: no such file or directory",
                         hint="give a signed manifest, a bundle directory or a bundle archive (.tar.gz)")
    if target.is_dir() or target.name.endswith((".tar.gz", ".tgz")):
        return verify_bundle(target, trust, integrity_only=integrity_only, checks=(check_reproduce_looks,))
    if integrity_only:
        raise UsageError("--integrity-only applies to bundles; a manifest is only ever verified against a policy")
    raw = read_bytes(target)
    mt = verify_manifest(target, raw, policy_files(trust))
    check_contexts(target, mt, image_contexts(load_manifest(target, raw, allow_unpinned=True)))
    who = ", ".join(f"{p} ({fp}, trusted by {src})" for p, fp, src in mt.signers)
    return VerifyResult(summary=f"TRUSTED: signed by {who}", details=dict(mt.as_dict()))
