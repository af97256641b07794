"""Manifest signatures: a detached DSSE envelope ``MANIFEST.sig`` beside the manifest, and the trust decision."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.errors import SignatureError
from kit.signing.dsse import parse_envelope, sha256_hex, sign_payload, statement, subject_digests
from kit.signing.keys import SigningKey
from kit.signing.trust import NS_MANIFEST, Verified, check_envelope, load_trust, user_trust_file

MANIFEST_PREDICATE = "urn:kit:manifest-approval:1"
SIG_SUFFIX = ".sig"
MAX_LISTED = 10  # refusal reasons and skipped trust lines named in one message


def signature_path(manifest: Path) -> Path:
    return manifest.with_name(manifest.name + SIG_SUFFIX)


def sign_manifest(manifest: Path, raw: bytes, key: SigningKey) -> tuple[Path, int]:
    """Sign ``raw`` (the manifest's bytes); keep existing signatures over the same bytes.

    Returns the signature file and how many signatures it now holds.
    """
    sig_path = signature_path(manifest)
    digest = sha256_hex(raw)
    envelope: dict[str, Any] | None = None
    body = statement({manifest.name: digest}, MANIFEST_PREDICATE, {"kit": "manifest"})
    if sig_path.exists():
        try:
            env, old_body = parse_envelope(sig_path.read_bytes(), str(sig_path))
            if digest in subject_digests(json.loads(old_body)).values():
                envelope, body = env, old_body
        except (SignatureError, json.JSONDecodeError):
            envelope = None
    env_out = sign_payload(body, key, envelope)
    sig_path.write_text(json.dumps(env_out, indent=2) + "\n")
    return sig_path, len(env_out["signatures"])


@dataclass(frozen=True)
class ManifestTrust:
    """Who vouched for a manifest; recorded in every bundle."""

    signed: bool
    signers: tuple[tuple[str, str, str], ...]  # (principal, fingerprint, trust source)
    allow_unsigned: bool = False
    note: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "signed": self.signed,
            "signers": [{"principal": p, "fingerprint": f, "trusted_by": s} for p, f, s in self.signers],
            "allow_unsigned": self.allow_unsigned,
            "note": self.note,
        }


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
        try:
            sig = sig_path.read_bytes()
        except FileNotFoundError:
            sig = None
    if sig is None:
        raise SignatureError(
            f"{manifest}: not signed (no {sig_path.name} beside it)",
            hint=f"sign it with `kit sign {manifest} --key ~/.ssh/id_ed25519`, or run with --allow-unsigned",
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
    if not result.trusted:
        raise _refusal(manifest, result, trust_files)
    note = f"trust lines skipped as malformed: {'; '.join(result.problems)}" if result.problems else ""
    return ManifestTrust(signed=True, signers=tuple(result.trusted), note=note)
