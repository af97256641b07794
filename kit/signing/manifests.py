"""Manifest signatures: a detached DSSE envelope ``MANIFEST.sig`` beside the manifest, and the trust decision."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import SignatureError
from kit.plumbing.files import atomic_write, read_bounded
from kit.signing.dsse import (
    parse_envelope,
    sha256_hex,
    sign_payload,
    statement,
    subject_annotations,
    subject_digests,
)
from kit.signing.keys import SigningKey
from kit.signing.trust import NS_MANIFEST, Verified, check_envelope, load_trust, user_trust_file

MANIFEST_PREDICATE = "urn:kit:manifest-approval:1"
SIG_SUFFIX = ".sig"
MAX_LISTED = 10  # refusal reasons and skipped trust lines named in one message
MAX_SIG_BYTES = 1 << 20
CONTEXT_PREFIX = "context:"  # subjects "context:<arm>:<context>": an arm's image context (kit.images digest)

# {"context:<arm>:<context>": (context sha256, {path in the context: "<mode> <digest>"})}
Contexts = Mapping[str, tuple[str, Mapping[str, str]]]


def signature_path(manifest: Path) -> Path:
    return manifest.with_name(manifest.name + SIG_SUFFIX)


def sign_manifest(manifest: Path, raw: bytes, key: SigningKey, contexts: Contexts | None = None) -> tuple[Path, int]:
    """Sign ``raw`` (the manifest's bytes) and every arm's image context (``contexts``, from
    ``kit.images.image_contexts``: one subject per context, its files listed as an annotation); keep
    existing signatures over exactly the same statement.

    Returns the signature file and how many signatures it now holds.
    """
    sig_path = signature_path(manifest)
    ctx = dict(contexts or {})
    subjects = {manifest.name: sha256_hex(raw), **{n: d for n, (d, _) in ctx.items()}}
    notes = {n: {"files": dict(files)} for n, (_, files) in ctx.items()}
    envelope: dict[str, Any] | None = None
    body = statement(subjects, MANIFEST_PREDICATE, {"kit": "manifest"}, notes)
    old = read_signature(sig_path)
    if old is not None:
        try:
            env, old_body = parse_envelope(old, str(sig_path))
            if old_body == body:
                envelope = env
        except (SignatureError, json.JSONDecodeError):
            envelope = None
    env_out = sign_payload(body, key, envelope)
    # written beside it and renamed over it: a symlink at the .sig path is replaced, never written through
    atomic_write(sig_path, (json.dumps(env_out, indent=2) + "\n").encode())
    return sig_path, len(env_out["signatures"])


@dataclass(frozen=True)
class ManifestTrust:
    """Who vouched for a manifest; recorded in every bundle."""

    signed: bool
    signers: tuple[tuple[str, str, str], ...]  # (principal, fingerprint, trust source)
    allow_unsigned: bool = False
    note: str = ""
    contexts: Contexts = field(default_factory=dict, compare=False)  # the image contexts the signature covers

    def as_dict(self) -> dict[str, object]:
        return {
            "signed": self.signed,
            "signers": [{"principal": p, "fingerprint": f, "trusted_by": s} for p, f, s in self.signers],
            "allow_unsigned": self.allow_unsigned,
            "note": self.note,
        }


def read_signature(sig_path: Path) -> bytes | None:
    """The bytes of a ``.sig`` (None when there is none), never through a symlink, at most 1 MiB; a link, a
    directory or a special file is a SignatureError (exit 4) naming it."""
    try:
        if sig_path.is_symlink():
            raise SignatureError(f"{sig_path}: is a symbolic link; kit never follows one for a signature",
                                 hint="replace it with the signature file itself")
        return read_bounded(sig_path, MAX_SIG_BYTES)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise SignatureError(f"{sig_path}: cannot be read as a signature file ({why})",
                             hint="a .sig is a regular JSON file written by `kit sign`: remove what is there, then "
                                  "sign the manifest again (`kit sign MANIFEST --key KEY`)") from None


def _listed(label: str, items: list[str]) -> str:
    if not items:
        return ""
    more = f"; ... and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else ""
    return f"\n  {label}:\n    " + "\n    ".join(items[:MAX_LISTED]) + more


def _refusal(manifest: Path, result: Verified, trust_files: list[Path]) -> SignatureError:
    who = "; ".join(f"{fp} (key comment {c!r}, self-declared)" for fp, c in result.untrusted)
    bad = f"; {len(result.invalid)} signature(s) did not verify" if result.invalid else ""
    files = ", ".join(str(f) for f in trust_files)
    return SignatureError(
        f"{manifest}: no signature by a trusted key. Signed by: {who or 'nobody valid'}{bad}; "
        f"not listed (for namespace {NS_MANIFEST}) in the trust file(s): {files}"
        + _listed("trust lines that did not allow the key", result.refusals)
        + _listed("trust lines skipped as malformed (they trust nothing, as in ssh-keygen)", result.problems),
        hint="if you trust that key, add a line 'PRINCIPAL namespaces=\"kit-manifest\" ssh-ed25519 KEY' "
        "to your allowed_signers file",
    )


def verify_manifest(manifest: Path, raw: bytes, trust_files: list[Path], sig: bytes | None = None) -> ManifestTrust:
    """Verify the detached signature of ``raw``; raise SignatureError unless a trusted key signed it.

    ``sig`` is the envelope's bytes (read from ``MANIFEST.sig`` when not given), so that a caller that
    keeps what it read (e.g. to copy into a bundle) verifies exactly those bytes. A trusted signature
    with malformed lines in the trust files passes; ``ManifestTrust.note`` names those lines.
    """
    sig_path = signature_path(manifest)
    if sig is None:
        sig = read_signature(sig_path)
    if sig is None:
        raise SignatureError(
            f"{manifest}: not signed (no {sig_path.name} beside it)",
            hint=f"sign it with `kit sign {manifest} --key ~/.ssh/id_ed25519`; `kit run` and `kit reproduce` also "
                 "take --allow-unsigned (recorded in the bundle)",
        )
    if not trust_files:
        raise SignatureError(
            f"{manifest}: no trust file to check the signature against",
            hint=f"list trusted keys in {user_trust_file()} or pass --trust FILE (allowed_signers format)",
        )
    env, body = parse_envelope(sig, str(sig_path))
    result = check_envelope(env, body, load_trust(trust_files), NS_MANIFEST)
    digests = subject_digests(result.statement)
    actual = sha256_hex(raw)
    if result.statement.get("predicateType") != MANIFEST_PREDICATE:
        raise SignatureError(f"{sig_path}: signs a {result.statement.get('predicateType')!r}, not a manifest")
    if actual not in digests.values():
        signed = ", ".join(f"{n} sha256:{d[:16]}..." for n, d in digests.items())
        raise SignatureError(
            f"{manifest}: the file changed after it was signed (signed: {signed}; file: sha256:{actual[:16]}...)",
            hint="review the change, then sign again with `kit sign`",
        )
    if result.invalid:
        # a signature that verifies under no key is tampering or a broken co-signature: never pass it silently
        raise SignatureError(
            f"{sig_path}: {len(result.invalid)} signature(s) did not verify (keyid "
            f"{', '.join(result.invalid[:MAX_LISTED])}) beside {len(result.trusted)} trusted one(s)",
            hint="remove the broken signature from the envelope, or sign again with `kit sign`")
    if not result.trusted:
        raise _refusal(manifest, result, trust_files)
    note = f"trust lines skipped as malformed: {'; '.join(result.problems)}" if result.problems else ""
    return ManifestTrust(signed=True, signers=tuple(result.trusted), note=note,
                         contexts=_signed_contexts(result.statement))


def _signed_contexts(stmt: Mapping[str, object]) -> dict[str, tuple[str, Mapping[str, str]]]:
    notes = subject_annotations(stmt)
    out: dict[str, tuple[str, Mapping[str, str]]] = {}
    for name, digest in subject_digests(stmt).items():
        if name.startswith(CONTEXT_PREFIX):
            files = notes.get(name, {}).get("files")
            out[name] = (digest, {str(k): str(v) for k, v in files.items()} if isinstance(files, dict) else {})
    return out


def _first_difference(signed: Mapping[str, str], actual: Mapping[str, str]) -> str:
    for rel in sorted({*signed, *actual}):
        if rel not in signed:
            return f"file {rel!r} was added"
        if rel not in actual:
            return f"file {rel!r} was removed"
        if signed[rel] != actual[rel]:
            return f"file {rel!r} differs (signed {signed[rel][:24]}..., now {actual[rel][:24]}...)"
    return "its digest differs (the signature lists no files to compare)"


def check_contexts(manifest: Path, trust: ManifestTrust, actual: Contexts) -> None:
    """Every arm's image context on disk (``actual``) must be exactly what the trusted signature covers;
    a signature that covers no context of a manifest with image contexts fails closed (SignatureError)."""
    if not actual:
        return
    fix = f"review the change, then sign again with `kit sign {manifest} --key KEY`"
    if not trust.contexts:
        raise SignatureError(f"{manifest}: the signature does not cover the image contexts "
                             f"({', '.join(sorted({n.split(':', 2)[2] for n in actual}))}); re-sign with kit sign",
                             hint="review the image contexts (Dockerfiles, files, kit.include), then sign again "
                             f"with `kit sign {manifest} --key KEY`")
    for name, (digest, files) in sorted(actual.items()):
        arm, context = name.split(":", 2)[1:]
        if name not in trust.contexts:
            raise SignatureError(f"{manifest}: arm {arm}: the signature does not cover the image context {context}; "
                                 "re-sign with kit sign", hint=fix)
        signed_digest, signed_files = trust.contexts[name]
        if signed_digest != digest:
            raise SignatureError(f"{manifest}: arm {arm}: image context {context} changed after the manifest was "
                                 f"signed: {_first_difference(signed_files, files)}", hint=fix)
