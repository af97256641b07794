"""Verifying a bundle: every file against the signed provenance, the signers against trust, and the summary.

Checks, in order: the bundle holds only regular files and directories; provenance.dsse.json is exactly as kit
writes it and every signature in it verifies under the key it names; the user's policy allows a signer for
``kit-bundle`` (``kit.bundle.policy``; skipped with --integrity-only, which says UNTRUSTED); the set of files and
each file's sha256 match the signed subjects; expert-pass files read as their model; summary.json equals a fresh
``kit.stats.summarize_bundle``; the manifest signature is re-checked under the policy and every recorded flag is shown.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature

from kit.bundle.checkpoints import check_chain, checkpoint_files
from kit.bundle.diff import first_difference
from kit.bundle.extract import Check as ExtractCheck
from kit.bundle.extract import extracted, is_archive
from kit.bundle.looks import check_looks
from kit.bundle.names import PROVENANCE, envelope_bytes, rel_problem, walk
from kit.bundle.policy import TRUSTED_MARK, UNTRUSTED_MARK, decide_trust, flags_line, manifest_check, recorded_flags
from kit.bundle.provenance import BUILD_TYPE, SLSA_PROVENANCE_V1
from kit.bundle.redo import redo_problems
from kit.bundle.schedules import check_schedules
from kit.bundle.subjects import Signed, file_problems, hash_signed, subject_sizes
from kit.errors import BundleError, KitError, SignatureError, UsageError
from kit.files import JsonObject
from kit.files.expert_pass import expert_pass_problems
from kit.files.read import MAX_FILE_BYTES, read_file
from kit.files.run import RunFile
from kit.files.summary import SUMMARY_SCHEMA_VERSION
from kit.plumbing.files import read_bounded
from kit.plumbing.jsontypes import TooDeep, loads
from kit.signing import (
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    fingerprint,
    pae,
    parse_envelope,
    parse_public_key,
    policy_files,
    subject_digests,
)
from kit.stats import summarize_bundle
from kit.stats.versions import LEGACY_BELOW, as_schema, known_versions
from kit.workload.check import check_workload

MAX_PROVENANCE_BYTES = 256 << 20
MAX_LISTED_PROBLEMS = 50
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
Check = Callable[[Path], tuple[str | None, list[str]]]  # a bundle's root -> (a note, its problems)
Unsealed = Callable[[Path, str], None]  # a bundle without provenance, its label -> raises what to say of it, or not
MISSING_PROVENANCE = (f"missing file: {PROVENANCE} (the bundle was never signed, or the signature was removed): "
                      "nobody vouches for its files")


@dataclass
class VerifyResult:
    """What `kit verify` prints: one line, and the details --json shows."""

    summary: str
    details: JsonObject = field(default_factory=dict)


def fail(label: str, problems: list[str], hint: str | None = None) -> BundleError:
    """One BundleError (exit 9) whose message names every problem (the first 50)."""
    shown = problems[:MAX_LISTED_PROBLEMS]
    more = len(problems) - len(shown)
    if len(problems) == 1:
        msg = f"bundle {label} failed verification: {problems[0]}"
    else:
        msg = f"bundle {label} failed verification ({len(problems)} problems):\n  " + "\n  ".join(shown)
        if more:
            msg += f"\n  ... and {more} more"
    return BundleError(msg, hint=hint)


def verify_bundle(target: Path, trust: list[Path], *, integrity_only: bool = False,
                  checks: Sequence[Check] = (), unsealed: Unsealed | None = None) -> VerifyResult:
    """Verify a bundle directory or an archive of one (``is_archive``: its name or its gzip bytes); BundleError
    (exit 9) on any problem, including a signer the policy (``trust``, else the user's trust file) does not allow
    for kit-bundle (``unsealed``: what to say of a directory without provenance, see ``signed_parts``)."""
    if target.is_dir():
        return verify_directory(target, trust, label=str(target), integrity_only=integrity_only, checks=checks,
                                unsealed=unsealed)
    if is_archive(target):
        if not target.exists():
            raise UsageError(f"{target}: no such archive")
        if not target.is_file():  # a FIFO, a device (a link to /dev/zero): nothing kit reads as an archive
            raise BundleError(f"{target}: not a regular file, so not an archive kit reads",
                              hint="give the .tar.gz file `kit archive` wrote")
        label = str(target)
        files = policy_files(trust)
        check = signed_statement(label, lambda env, body: decide_trust(env, body, files, label,
                                                                       integrity_only=integrity_only))
        with extracted(target, check, read := hashlib.sha256()) as root:  # the bytes read: no 2nd read
            res = verify_directory(root, trust, label=label, integrity_only=integrity_only, checks=checks)
        res.details["archive"] = {"path": str(target), "sha256": read.hexdigest(), "top": root.name}
        return res
    raise BundleError(f"{target}: neither a bundle directory nor a bundle archive (a gzip file, as `kit archive` "
                      "writes)")


def signed_statement(label: str, decide: Callable[[dict[str, Any], bytes], object] | None = None) -> ExtractCheck:
    """An archive's provenance check, made before any other member is written: its signatures and subjects, then
    ``decide`` (the trust decision; None: integrity only). Extraction then refuses unlisted, oversized and altered
    members as they stream, so an archive costs what its provenance signs, not what it holds."""

    def check(provenance: Path) -> dict[str, Any]:
        env, body, stmt = read_envelope(provenance, label)
        signed_subjects(stmt, label)
        check_signatures(env, body, stmt, label)
        if decide is not None:
            decide(env, body)
        return stmt

    return check


def signed_parts(root: Path, label: str, missing_hint: str, unsealed: Unsealed | None = None) -> Signed:
    """The envelope, its payload and the signed subjects, after checking every signature's validity. A bundle
    without provenance is first handed to ``unsealed`` (`kit verify`'s: a run writing it now, or the command that
    finishes one that never ended); without it, one with checkpoints is sent to `kit verify`, which says which."""
    try:
        _, on_disk = walk(root)
    except BundleError as e:
        raise fail(label, [e.message], e.hint) from None
    except OSError as e:
        raise fail(label, [f"unreadable: {e}"]) from None
    if PROVENANCE not in on_disk:
        if unsealed is not None:
            unsealed(root, label)
        if checkpoint_files(root):  # a run that never ended (SIGKILL, power loss, a full disk), or one running now
            missing_hint = (f"its run never ended, or a kit process is running it now: `kit verify "  # the label: the
                            f"{shlex.quote(str(Path(label).resolve()))}` says which, and prints the command that "
                            "finishes it or what a resume of it would refuse")  # bundle as given, where ``root`` is
                            # kit reproduce's private copy of it
        raise fail(label, [MISSING_PROVENANCE], hint=missing_hint)
    env, body, stmt = read_envelope(root / PROVENANCE, label)
    subjects = signed_subjects(stmt, label)
    check_signatures(env, body, stmt, label)
    try:
        sizes = subject_sizes(stmt)
    except ValueError as e:
        raise fail(label, [f"{PROVENANCE}: {e}"]) from None
    return Signed(env, body, subjects, set(on_disk), sizes)


def verify_directory(root: Path, trust: list[Path], *, label: str, integrity_only: bool = False,
                     checks: Sequence[Check] = (), unsealed: Unsealed | None = None) -> VerifyResult:
    """``checks``: the callers' own recomputations (kit reproduce's looks), each giving a note and its problems."""
    files = policy_files(trust)
    env, body, subjects, on_disk, sizes = signed_parts(root, label, "nothing vouches for an unsigned bundle", unsealed)
    signer = decide_trust(env, body, files, label, integrity_only=integrity_only)
    nbytes = check_files(root, sorted(f for f in on_disk if f != PROVENANCE), subjects, label, sizes)
    chain_note, chain, problems = check_chain(root, None if integrity_only else files, subjects)
    if problems:
        raise fail(label, problems, hint="its checkpoints do not hold what its provenance signed; get an untouched one")
    if typed := expert_pass_problems(root):  # manifest expert_pass: its files as their model
        raise fail(label, typed, hint="a bundle file kit reads does not validate; get an untouched copy")
    if redone := redo_problems(root):  # a cell re-run by --redo must have been failed or client-bound
        raise fail(label, redone, hint="see docs/statistics.md (Re-measured cells)")
    notes = []
    for check in (check_looks, *checks):  # design.sequential's looks, then the callers' (reproduce-looks/)
        note, look_problems = check(root)
        if look_problems:
            raise fail(label, look_problems, hint="its looks are not what its records give; get an untouched copy")
        notes += [note] if note else []
    summary_note = "; ".join([check_summary(root, label), *notes])
    sched_note, sched_problems = check_schedules(root)
    if sched_problems:
        raise fail(label, sched_problems, hint="the records are not what the levels' schedules sent; get an "
                   "untouched bundle")
    workload_note, problems = check_workload(root)  # intended (workload/) against sent (records)
    if problems:
        raise fail(label, problems, hint="the records do not match the workload the bundle says was sent")
    run = _run_info(root)
    manifest = {"status": "not checked (--integrity-only)"} if integrity_only else manifest_check(root, files, label)
    rec = recorded_flags(root)
    lines = [signer.text,
             f"  files: {len(subjects)} checked against the signed provenance; {summary_note}; {sched_note}"
             + (f"; run {run['status']}" if run.get("status") else ""),
             f"  checkpoints: {chain_note}",
             f"  workload: {workload_note}",
             f"  manifest approval (kit-manifest): {manifest['status']}",
             f"  {flags_line(rec)}"]
    if run.get("reproduces"):
        lines.append(f"  {run['reproduces']}")
    details: JsonObject = {"bundle": label, "trust": TRUSTED_MARK if signer.trusted else UNTRUSTED_MARK,
                           "verdict": signer.text, "files": len(subjects), "bytes": nbytes,
                           "signers": signer.signers, "trusted": signer.trusted, "summary": summary_note,
                           "schedules": sched_note, "run": run,
                           "manifest_signature": manifest, "integrity_only": integrity_only, "checkpoints": chain,
                           "workload": workload_note, **rec}
    return VerifyResult(summary="\n".join(lines), details=details)


# --------------------------------------------------------------------------- the envelope


def read_envelope(path: Path, label: str) -> tuple[dict[str, Any], bytes, dict[str, Any]]:
    """Parse provenance.dsse.json and insist it is byte for byte what kit writes."""
    if path.stat().st_size > MAX_PROVENANCE_BYTES:
        raise fail(label, [f"{PROVENANCE}: larger than {MAX_PROVENANCE_BYTES} bytes"])
    data = path.read_bytes()
    try:
        env, body = parse_envelope(data, PROVENANCE)
    except SignatureError as e:
        msg = e.message if e.message.startswith(PROVENANCE) else f"{PROVENANCE}: {e.message}"
        raise fail(label, [msg]) from None
    problems = []
    if set(env) != {"payloadType", "payload", "signatures"}:
        problems.append(f"{PROVENANCE}: unexpected fields {sorted(set(env))}")
    elif env["payload"] != base64.b64encode(body).decode():
        problems.append(f"{PROVENANCE}: payload is not in canonical base64")
    elif data != envelope_bytes(env):
        problems.append(f"{PROVENANCE}: not in the layout kit writes (bytes were changed outside the signed payload)")
    if problems:
        raise fail(label, problems)
    try:
        stmt = loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise fail(label, [f"{PROVENANCE}: signed payload is not JSON"]) from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise fail(label, [f"{PROVENANCE}: signed payload is not an in-toto Statement v1"])
    return env, body, stmt


def signed_subjects(stmt: Mapping[str, Any], label: str) -> dict[str, str]:
    """The signed ``{path: sha256}``; refuses odd names, duplicates and a statement of the wrong kind."""
    problems = []
    if stmt.get("predicateType") != SLSA_PROVENANCE_V1:
        problems.append(f"{PROVENANCE}: predicateType {stmt.get('predicateType')!r}, expected {SLSA_PROVENANCE_V1!r}")
    build = _get(stmt, "predicate", "buildDefinition", "buildType")
    if build != BUILD_TYPE:
        problems.append(f"{PROVENANCE}: buildType {build!r}, expected {BUILD_TYPE!r}")
    raw = stmt.get("subject")
    if not isinstance(raw, list):
        raise fail(label, [*problems, f"{PROVENANCE}: statement has no subject list"])
    seen: set[str] = set()
    for s in raw:
        name = s.get("name") if isinstance(s, dict) else None
        digest = _get(s, "digest", "sha256")
        if not isinstance(name, str) or not isinstance(digest, str) or not _HEX64.match(digest):
            problems.append(f"{PROVENANCE}: malformed subject {json.dumps(s)[:120]}")
        elif (why := rel_problem(name)) or name == PROVENANCE or name in seen:
            problems.append(f"{PROVENANCE}: bad subject name {name!r} ({why or 'listed twice or names itself'})")
        else:
            seen.add(name)
    if problems:
        raise fail(label, problems)
    return subject_digests(dict(stmt))


def check_signatures(env: Mapping[str, Any], body: bytes, stmt: Mapping[str, Any], label: str) -> None:
    """Every signature must verify under the key it names; the runner's key line must be the signed one."""
    sigs = env["signatures"]
    if not sigs:
        raise fail(label, [f"{PROVENANCE}: has no signatures"])
    signed_signer = _get(stmt, "predicate", "runDetails", "builder", "kit_signer")
    message = pae(PAYLOAD_TYPE, body)
    seen: set[str] = set()
    for s in sigs:
        problem = _signature_problem(s, message, signed_signer, seen)
        if problem:
            raise fail(label, [f"{PROVENANCE}: {problem}"],
                       hint="the provenance was altered after signing; re-run or re-sign from trusted records")


def _signature_problem(s: Any, message: bytes, signed_signer: Any, seen: set[str]) -> str | None:
    if not isinstance(s, dict) or set(s) != {"keyid", "sig", "publicKey"} or \
            not all(isinstance(v, str) for v in s.values()):
        return "malformed signature entry (expected keyid, sig, publicKey strings)"
    try:
        pub = parse_public_key(s["publicKey"])
    except SignatureError as e:
        return e.message
    fp = fingerprint(pub)
    if s["keyid"] != fp or fp in seen:
        return f"signature keyid {s['keyid']!r} does not match its public key {fp} (or is listed twice)"
    seen.add(fp)
    try:
        sig = base64.b64decode(s["sig"], validate=True)
    except (binascii.Error, ValueError):
        return f"signature by {fp} is not valid base64"
    if base64.b64encode(sig).decode() != s["sig"]:
        return f"signature by {fp} is not in canonical base64"
    try:
        pub.verify(sig, message)
    except InvalidSignature:
        return f"invalid signature by {fp}: the signed statement or the signature was changed"
    if isinstance(signed_signer, dict) and signed_signer.get("keyid") == fp \
            and signed_signer.get("publicKey") != s["publicKey"]:
        return f"the public key line of {fp} differs from the signed one (runDetails.builder.kit_signer)"
    return None


# --------------------------------------------------------------------------- files


def check_files(root: Path, on_disk: list[str], subjects: Mapping[str, str], label: str,
                sizes: Mapping[str, int]) -> int:
    """Compare every file with the signed subjects (a size differing from its signed one refused before hashing);
    return the number of bytes hashed."""
    digests, refused, nbytes = hash_signed(root, on_disk, subjects, sizes)
    problems = file_problems(on_disk, subjects, digests, refused)
    if problems:
        raise fail(label, problems, hint="a bundle is immutable once signed; get an untouched copy")
    return nbytes


# --------------------------------------------------------------------------- summary


def check_summary(root: Path, label: str) -> str:
    """Recompute summary.json with ``kit.stats.summarize_bundle`` and require exact JSON equality (a summary an
    earlier kit wrote: as its schema writes it, ``kit.stats.versions``; a schema this kit cannot make: refused)."""
    path = root / "summary.json"
    if not path.exists():
        return "no summary.json to recompute"
    try:
        stored = loads(read_bounded(path, MAX_FILE_BYTES))
    except TooDeep:
        raise fail(label, ["summary.json: JSON nested too deeply (kit never writes such a file)"]) from None
    except (OSError, ValueError) as e:  # not JSON, not UTF-8, too large, not a regular file
        raise fail(label, [f"summary.json: not JSON ({e})"]) from None
    version = _version(stored)
    if version is not None and version not in known_versions():
        newer = version > SUMMARY_SCHEMA_VERSION
        raise fail(label, [f"summary.json: summary schema {version}, which this kit cannot recompute (it knows "
                           f"schemas {known_versions().start}-{SUMMARY_SCHEMA_VERSION})"],
                   hint="verify it with the kit that made it, or a newer one" if newer else
                   "verify it with a kit of that time; its figures are not taken on trust here")
    try:
        legacy = version is not None and version < LEGACY_BELOW
        fresh = loads(json.dumps(summarize_bundle(root, legacy=True) if legacy else summarize_bundle(root)))
    except KitError as e:
        raise fail(label, [f"summary.json: recomputing it from the records failed: {e.message}"]) from None
    except Exception as e:  # noqa: BLE001 - records of a signed bundle can still make stats fail; name it
        raise fail(label, [f"summary.json: recomputing it from the records failed: {type(e).__name__}: {e}"]) from None
    note = ""
    if version is not None and version != SUMMARY_SCHEMA_VERSION:
        earlier = as_schema(fresh, version)
        if earlier is None:
            raise fail(label, [f"summary.json: summary schema {version}, and the records hold what that schema "
                               "judged otherwise (responses shorter than asked): this kit cannot recompute it"],
                       hint="verify it with a kit of that time")
        fresh, note = earlier, f" (summary schema {version}, as the kit that wrote it computes it)"
    where = first_difference(stored, fresh)
    if where is not None:
        raise fail(label, [f"summary.json: differs from the summary recomputed from the records at {where}"],
                   hint="re-render it with `kit report BUNDLE` if the records are the ones you trust")
    return f"summary.json recomputed from the records OK{note}"


def _version(stored: Any) -> int | None:
    """The stored summary's schema number (None when it has none that is an int: then it is compared as this
    kit's schema and fails at its schema_version like any other difference)."""
    version = stored.get("schema_version") if isinstance(stored, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


# --------------------------------------------------------------------------- helpers


def _get(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def _run_info(root: Path) -> JsonObject:
    """run id, status and experiment as run.json states them ({} when it cannot be read: the signature,
    not run.json, decides whether a bundle verifies)."""
    try:
        run = read_file(root, "run.json", RunFile)
    except BundleError:
        return {}
    info: JsonObject = {k: getattr(run, k) for k in ("run_id", "status", "experiment") if k in run.model_fields_set}
    if run.reproduces is not None:  # `kit reproduce`: the source it names, as the signed run.json says
        src = run.reproduces.source
        info["reproduces"] = (f"reproduces {src.top} (run {src.run_id}, provenance sha256 {src.provenance_sha256}): "
                              f"{run.reproduces.verdict.replace('_', ' ')} (reproduce.json)")
    return info
