"""What a run starts from: the manifest's exact bytes (the bundle's copy when resuming), its signature,
the trust decision, and, when resuming, what was known of the bundle's integrity before."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.bundle import Bundle, verify_integrity
from kit.errors import BundleError, SignatureError, UsageError
from kit.experiment.options import RunOptions
from kit.files.run import RunFile
from kit.manifest import LoadedManifest, load_manifest, project_root, read_bytes
from kit.signing import ManifestTrust, default_trust_files, signature_path, verify_manifest


@dataclass(frozen=True)
class RunInputs:
    lm: LoadedManifest
    trust: ManifestTrust
    sig: bytes | None
    resume_note: str  # the bundle's integrity before a resume ("verified" or why not); "" for a new run


@dataclass(frozen=True)
class ResumeSources:
    raw: bytes
    sig: bytes | None
    run: RunFile
    original: Path  # where the manifest came from, to find the trust files it was run under


def check_trust(path: Path, raw: bytes, sig: bytes | None, trust_files: list[Path],
                allow_unsigned: bool) -> ManifestTrust:
    """Verify the signature over exactly ``raw`` (with exactly ``sig``); with --allow-unsigned, record why
    the manifest was accepted anyway."""
    try:
        if sig is None:
            raise SignatureError(f"{path}: not signed (no {signature_path(path).name} beside it)",
                                 hint=f"sign it with `kit sign {path} --key KEY`, or pass --allow-unsigned")
        return verify_manifest(path, raw, trust_files, sig)
    except SignatureError as e:
        if not allow_unsigned:
            raise
        return ManifestTrust(signed=False, signers=(), allow_unsigned=True, note=e.message)


def resume_sources(root: Path, manifest: Path | None) -> ResumeSources:
    bundle = Bundle.open(root)  # BundleError (exit 9) when it is not a kit bundle
    run = bundle.read("run.json", RunFile)
    try:
        raw = bundle.path("manifest.yaml").read_bytes()
    except OSError as e:
        raise BundleError(f"{root}: cannot read the bundle's manifest.yaml ({e})",
                          hint=f"check it with `kit verify {root}`") from None
    sig_file = bundle.path("manifest.yaml.sig")
    sig = sig_file.read_bytes() if sig_file.exists() else None
    if manifest is not None and read_bytes(manifest) != raw:
        raise UsageError(f"{manifest} differs from the manifest the bundle {root} was started with",
                         hint="resume without MANIFEST, or start a new run")
    # trust as for the original: the project the manifest came from (its allowed_signers) or the user file
    original = Path(run.manifest_source or root / "manifest.yaml")
    return ResumeSources(raw, sig, run, original)


def verify_before_resume(root: Path) -> str:
    """A resumed bundle is re-signed: first prove nobody changed what is already in it."""
    if not (root / "provenance.dsse.json").exists():
        return "none: kit was killed before it could sign; earlier files are carried over unverified"
    verify_integrity(root)  # raises BundleError (exit 9) naming any changed, added or missing file
    return "verified"


def load_for_run(manifest: Path | None, opts: RunOptions) -> RunInputs:
    """Read the manifest (the bundle's copy when resuming), verify its signature over exactly those
    bytes, validate it. A resume keeps the flags the run was started with."""
    note = ""
    if opts.resume is not None:
        src = resume_sources(opts.resume, manifest)
        raw, sig, label = src.raw, src.sig, src.original
        note = verify_before_resume(opts.resume)
        opts.allow_unsigned = opts.allow_unsigned or src.run.flags.allow_unsigned
        opts.allow_unpinned = opts.allow_unpinned or src.run.flags.allow_unpinned
    else:
        if manifest is None:
            raise UsageError("give a MANIFEST to run, or --resume BUNDLE")
        raw = read_bytes(manifest)
        sig_file = signature_path(manifest)
        sig = sig_file.read_bytes() if sig_file.exists() else None
        label = manifest
    trust_files = opts.trust or default_trust_files(label, project_root(label))
    trust = check_trust(label, raw, sig, trust_files, opts.allow_unsigned)
    lm = load_manifest(label, raw, allow_unpinned=opts.allow_unpinned)
    return RunInputs(lm, trust, sig, note)
