"""`kit verify`: one entry point for manifests (signatures) and bundles (integrity + provenance).

Both answer "signed by whom, and does my policy allow that key here?": the policy is the files given with
--trust, else the user's own trust file; never a file found beside or above what is checked.

A bundle without provenance is either being written now (a kit run or resume holds its lock: it says whose run,
and that it is to be verified when that run has ended) or its run never ended (SIGKILL, power loss): then it
prints the command that finishes it, as that run would have (``kit.hints.finish_hint``), once it has checked that
the resume would accept the files as they are (``kit.bundle.resume.resume_refusals``); where it would not, it names
the files that differ from the signed checkpoints and says what to do instead."""

from __future__ import annotations

import shlex
from pathlib import Path

from pydantic import ValidationError

from kit.bundle.checkpoints import Chain, checkpoint_files, read_chain
from kit.bundle.dirlock import in_use
from kit.bundle.extract import is_archive
from kit.bundle.resume import resume_refusals
from kit.bundle.verify import MISSING_PROVENANCE, Unsealed, VerifyResult, fail, verify_bundle
from kit.errors import BundleError, KitError, UsageError
from kit.files.read import read_file
from kit.files.run import RunFile
from kit.hints import Invocation, finish_hint, latest_invocation
from kit.images.context import image_contexts
from kit.manifest import load_manifest, read_bytes
from kit.reproduce.looks import check_reproduce_looks
from kit.runtime.records import live_owner, owner_text
from kit.signing import (
    check_contexts,
    default_trust_files,
    policy_files,
    signature_path,
    user_trust_file,
    verify_manifest,
)

__all__ = ["VerifyResult", "verify_target"]


def verify_target(target: Path, trust: list[Path], *, integrity_only: bool = False) -> VerifyResult:
    if not target.exists():
        raise UsageError(f"{target}: no such file or directory",
                         hint="give a signed manifest, a bundle directory or a bundle archive (.tar.gz)")
    if target.is_dir() or is_archive(target):  # an archive by its name or its bytes (gzip), whatever it is called
        return verify_bundle(target, trust, integrity_only=integrity_only, checks=(check_reproduce_looks,),
                             unsealed=unsealed(trust))
    if integrity_only:
        raise UsageError("--integrity-only applies to bundles; a manifest is only ever verified against a policy")
    raw = read_bytes(target)
    mt = verify_manifest(target, raw, policy_files(trust))
    check_contexts(target, mt, image_contexts(load_manifest(target, raw, allow_unpinned=True)))
    who = ", ".join(f"{p} ({fp}, trusted by {src})" for p, fp, src in mt.signers)
    return VerifyResult(summary=f"TRUSTED: signed by {who}", details=dict(mt.as_dict()))


def unsealed(trust: list[Path]) -> Unsealed:
    """What `kit verify` (under the policy ``trust``) says of a bundle directory without provenance (exit 9)."""
    def explain(root: Path, label: str) -> None:
        if in_use(root):  # the lock a kit run or resume holds while it writes the bundle
            raise fail(label, [f"a run in progress: {writer(root)} is writing it now, so nothing signed covers its "
                               "files yet"], hint="verify it when that run has ended: it seals the bundle then")
        if checkpoint_files(root):  # a run that never ended: what finishes it, from its signed run.json
            refusals, hint = finishing(root, trust)
            raise fail(label, [MISSING_PROVENANCE, *refusals], hint=hint)

    return explain


def writer(root: Path) -> str:
    """Whose run holds the bundle's lock: its run lock's owner (``kit.runtime.records``), where one names it."""
    try:
        run_id: str | None = read_file(root, "run.json", RunFile).run_id
    except BundleError:  # not written yet: the name kit gives a bundle ends in its run id
        run_id = root.resolve().name.rsplit("-", 1)[-1]
    owner = live_owner(run_id)
    return owner_text(owner) if owner is not None else "a kit run or resume (no live run lock names which)"


def finishing(root: Path, trust: list[Path]) -> tuple[list[str], str]:
    """What a resume of a run that never ended would refuse (the files not as its signed checkpoints hold them),
    and the hint: the command that finishes it, built from the run.json its checkpoints signed as the policy
    verifies them (where that is ``--trust`` files that do not vouch for the runner and the user's own file does,
    that file is added, as `kit run` adds it to the command it prints); where the resume would refuse, what to do
    instead."""
    user = user_trust_file()
    chain, flags = read_chain(root, policy_files(trust)), list(trust)
    if chain.run_json is None and trust and user not in trust and user.is_file():
        wider = read_chain(root, [*trust, user])
        if wider.run_json is not None:
            chain, flags = wider, [*trust, user]
    run = _signed_run(chain)
    if run is None:
        why = f" ({chain.stopped})" if chain.stopped else ""
        return [], (f"its run never ended, and no checkpoint signed by a runner your policy trusts for kit-bundle "
                    f"holds its run.json{why}: a resume would refuse it; if you trust its runner, give that key's line "
                    "with --trust FILE")
    flags, untrusted = _manifest_policy(root, run, flags)
    finish = finish_hint(root, run, flags) + (f"; but {untrusted}" if untrusted else "")
    refusals = [f"{p} (a resume refuses this)" for p in resume_refusals(root, chain)]
    if not refusals:
        return [], finish
    then = finish.split(" never ended; ", 1)[1] if " never ended; " in finish else finish
    again = (f"`{shlex.join(run.argv)}` (its start, as its signed run.json records it, from the directory it ran in)"
             if run.argv[:1] == ["kit"] and len(run.argv) > 2 else "run its manifest again")
    files, it = ("that file is", "it") if len(refusals) == 1 else (f"those {len(refusals)} files are", "them")
    return refusals, (f"its run never ended, but a resume refuses it (exit 9) while {files} not as its signed "
                      f"checkpoints hold {it}. Either make {it} so again (remove a file they do not name; restore a "
                      f"changed or missing one from an untouched copy of the bundle), then {then}; or start the run "
                      f"again in a new bundle: {again}")


def _manifest_policy(root: Path, run: RunFile, flags: list[Path]) -> tuple[list[Path], str | None]:
    """The policy a resume also needs for the bundle's manifest: it checks manifest.yaml (as signed) again for
    kit-manifest under the policy it is given, so ``flags`` (what verified the checkpoints) is widened by the trust
    files the run's recorded command line gave (`kit run --trust allowed_signers`: the repository's example key),
    where ``flags`` trusts none of its signers and those do; where they do not either, what to add (the text)."""
    if run.flags.allow_unsigned or not signature_path(root / "manifest.yaml").is_file() or \
            _trusts_manifest(root, flags):
        return flags, None  # --allow-unsigned, or no signature to approve (resume_refusals names one gone missing)
    given = _recorded_trust(root, run)
    wider = list(dict.fromkeys([*(flags or default_trust_files()), *(p for p in given if p.is_file())]))
    if wider != flags and _trusts_manifest(root, wider):
        return wider, None
    started = f" (its run was given {', '.join(shlex.quote(str(p)) for p in given)})" if given else ""
    return flags, (f"a resume also checks its manifest (manifest.yaml) under the policy it is given, and that "
                   f"policy trusts none of its signers for kit-manifest: add --trust FILE, the allowed_signers file "
                   f"that does{started}")


def _trusts_manifest(root: Path, flags: list[Path]) -> bool:
    try:
        verify_manifest(root / "manifest.yaml", read_bytes(root / "manifest.yaml"), policy_files(flags))
    except KitError:
        return False
    return True


def _recorded_trust(root: Path, run: RunFile) -> list[Path]:
    """The --trust and --trust-only files of the command line the run last ran with (its start's, or a resume's,
    as ``finish_hint`` reads it), absolute where the record tells where it ran."""
    command = "reproduce" if run.reproduces is not None or Invocation.of(run.argv).command == "reproduce" else "run"
    inv, base = latest_invocation(root, run, command)
    values = [*inv.values.get("--trust", []), *inv.values.get("--trust-only", [])]
    return [Path(v) if Path(v).is_absolute() or base is None else base / v for v in values]


def _signed_run(chain: Chain) -> RunFile | None:
    if chain.run_json is None:
        return None
    try:
        return RunFile.model_validate_json(chain.run_json)
    except ValidationError:
        return None
