"""What a run starts from: the manifest's exact bytes (the bundle's copy when resuming), its signature,
the trust decision, and, when resuming, who vouched for the bundle before.

Trust is the user's policy (--trust, else ~/.config/kit/allowed_signers), never a file beside the manifest
or bundle. A resume takes nothing that decides trust from the bundle: its provenance must verify as trusted
for kit-bundle, its manifest signature is checked again under the current policy, and --allow-unsigned /
--allow-unpinned count only when given on this command line (never from the bundle's run.json)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kit.bundle import ResumeTrust, resume_trust
from kit.errors import SignatureError, UsageError
from kit.experiment.options import RunOptions
from kit.files.run import RunFile
from kit.images.context import image_contexts
from kit.manifest import LoadedManifest, check_runnable, load_manifest, read_bytes
from kit.signing import ManifestTrust, check_contexts, policy_files, signature_path, verify_manifest
from kit.signing.manifests import read_signature


@dataclass(frozen=True)
class RunInputs:
    lm: LoadedManifest
    trust: ManifestTrust
    sig: bytes | None
    resume_note: str  # who vouched for the bundle before a resume ("verified; TRUSTED: ..."); "" for a new run


@dataclass(frozen=True)
class ResumeSources:
    raw: bytes
    sig: bytes | None
    run: RunFile
    original: Path  # where the manifest came from (its project holds the image contexts; it decides no trust)


def check_trust(path: Path, raw: bytes, sig: bytes | None, trust_files: list[Path],
                allow_unsigned: bool, *, resumed: bool = False) -> ManifestTrust:
    """Verify the signature over exactly ``raw`` (with exactly ``sig``); with --allow-unsigned, record why
    the manifest was accepted anyway. ``resumed``: ``path`` is a bundle's copy, which signing now cannot change."""
    try:
        if sig is None:
            if resumed:
                raise SignatureError(f"{path}: the run was started without a signature (no manifest.yaml.sig in "
                                     "the bundle)", hint="pass --allow-unsigned again to resume it")
            raise SignatureError(f"{path}: not signed (no {signature_path(path).name} beside it)",
                                 hint=f"sign it with `kit sign {path} --key KEY`, or pass --allow-unsigned")
        return verify_manifest(path, raw, trust_files, sig)
    except SignatureError as e:
        if not allow_unsigned:
            raise
        return ManifestTrust(signed=False, signers=(), allow_unsigned=True, note=e.message)


def resume_sources(root: Path, manifest: Path | None, trust: ResumeTrust) -> ResumeSources:
    """The manifest, its signature and run.json exactly as the bundle's signatures vouch for them (the bytes
    read are the bytes checked)."""
    raw = trust.signed_bytes(root, "manifest.yaml")
    sig = trust.signed_bytes(root, "manifest.yaml.sig") if "manifest.yaml.sig" in trust.files else None
    run = trust.run
    if manifest is not None and read_bytes(manifest) != raw:
        raise UsageError(f"{manifest} differs from the manifest the bundle {root} was started with",
                         hint="resume without MANIFEST, or start a new run")
    original = Path(run.manifest_source or root / "manifest.yaml")
    return ResumeSources(raw, sig, run, original)


def verify_before_resume(root: Path, trust: list[Path]) -> ResumeTrust:
    """A resumed bundle is re-signed: first prove that a runner the policy trusts signed exactly what kit will
    believe of it: the whole bundle when its run ended, else the verified prefix of its checkpoints (neither:
    BundleError, exit 9, naming why). The bundle's lock is not held yet: the session checks it all again."""
    return resume_trust(root, trust)


def load_for_run(manifest: Path | None, opts: RunOptions) -> RunInputs:
    """Read the manifest (the bundle's copy when resuming), verify its signature over exactly those
    bytes under the current policy, validate it. The allow_* flags are this command line's only."""
    note = ""
    if opts.resume is not None:
        trust = verify_before_resume(opts.resume, opts.trust)  # before anything of the bundle is believed
        note = trust.note
        src = resume_sources(opts.resume, manifest, trust)
        # messages name the bundle's copy (the bytes checked); the images come from the project the run started in
        raw, sig, label, origin = src.raw, src.sig, opts.resume / "manifest.yaml", src.original
    else:
        if manifest is None:
            raise UsageError("give a MANIFEST to run, or --resume BUNDLE")
        raw = read_bytes(manifest)
        sig = read_signature(signature_path(manifest))
        label, origin = manifest, None
    try:
        return inputs_of(label, raw, sig, opts, note, origin=origin)
    except SignatureError as e:
        if opts.resume is not None:
            e.note("a resume re-checks the manifest under your current trust policy and never takes "
                   "--allow-unsigned from the bundle's run.json: pass it again if you accept an unapproved manifest")
        raise


def inputs_of(label: Path, raw: bytes, sig: bytes | None, opts: RunOptions, note: str = "", *,
              origin: Path | None = None) -> RunInputs:
    """Exactly ``raw`` with exactly ``sig`` (``label``: where they are said to come from, named in messages; its
    project, or ``origin``'s where given (a resume), holds the image contexts): the signature verified under the
    current policy, the manifest validated, the contexts on disk checked against the signed ones. The allow_* flags
    are ``opts``' only."""
    trust = check_trust(label, raw, sig, policy_files(opts.trust), opts.allow_unsigned, resumed=origin is not None)
    lm = replace(load_manifest(label, raw, allow_unpinned=opts.allow_unpinned), origin=origin)
    check_runnable(lm)  # a template never runs; model.path must be on this host (exit 3)
    contexts = image_contexts(lm)  # what the build will send, from the manifest's project; exit 3 if outside it
    if trust.signed:
        try:
            check_contexts(label, trust, contexts)
        except SignatureError as e:
            if not opts.allow_unsigned:
                if origin is not None:  # the bundle's signature is what it is: the contexts must come back to it
                    e.hint = (f"put the image contexts under {lm.project_root} back as they were when the run "
                              "started (e.g. git checkout), or pass --allow-unsigned (recorded)")
                raise
            trust = ManifestTrust(signed=False, signers=(), allow_unsigned=True, note=e.message)
    return RunInputs(lm, trust, sig, note)
