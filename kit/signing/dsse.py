"""DSSE envelopes (https://github.com/secure-systems-lab/dsse) over in-toto Statements v1.

The envelope signs the exact payload bytes through DSSE's pre-authentication encoding (PAE), so no
canonicalisation is involved. Each signature entry carries the signer's public key as a hint; whether
that key is trusted is decided by ``kit.signing.trust``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from kit.errors import SignatureError
from kit.plumbing.jsontypes import loads
from kit.signing.keys import SigningKey

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"


class SignatureEntry(TypedDict):
    """One signature of an envelope as kit writes it (``publicKey`` is a hint, never trusted by itself)."""

    keyid: str
    sig: str
    publicKey: NotRequired[str]


class Envelope(TypedDict):
    """A DSSE envelope as kit writes it; envelopes read from files stay untrusted JSON until checked."""

    payloadType: str
    payload: str
    signatures: list[SignatureEntry]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def b64decode(s: str) -> bytes:
    """DSSE allows standard and URL-safe base64, with or without padding."""
    s = s.strip()
    padded = s + "=" * (-len(s) % 4)
    try:
        if "-" in s or "_" in s:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as e:
        raise SignatureError(f"bad base64 in signature envelope: {e}") from None


def statement(subjects: Mapping[str, str], predicate_type: str, predicate: Mapping[str, object],
              annotations: Mapping[str, Mapping[str, object]] | None = None) -> bytes:
    """An in-toto Statement v1 (deterministic JSON bytes) over ``{name: sha256}``; ``annotations`` adds an
    in-toto ResourceDescriptor ``annotations`` map to the subjects it names."""
    notes = annotations or {}

    def subject(n: str, d: str) -> dict[str, object]:
        out: dict[str, object] = {"name": n, "digest": {"sha256": d}}
        if n in notes:
            out["annotations"] = dict(notes[n])
        return out

    stmt = {
        "_type": STATEMENT_TYPE,
        "subject": [subject(n, d) for n, d in sorted(subjects.items())],
        "predicateType": predicate_type,
        "predicate": predicate,
    }
    return json.dumps(stmt, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign_payload(body: bytes, key: SigningKey, envelope: Mapping[str, Any] | None = None) -> Envelope:
    """Return a DSSE envelope over ``body``, adding ``key``'s signature to ``envelope``'s if given (replacing
    this key's own; an entry that is not an object with a string sig, which no verifier can check, is dropped;
    a keyid is optional in DSSE, and kit's verifier tries an entry without one against every trusted key)."""
    payload_type = PAYLOAD_TYPE if envelope is None else str(envelope["payloadType"])
    env: Envelope = {
        "payloadType": payload_type,
        "payload": base64.b64encode(body).decode() if envelope is None else str(envelope["payload"]),
        "signatures": [] if envelope is None else list(envelope["signatures"]),
    }
    sig = key.private.sign(pae(payload_type, body))
    entry: SignatureEntry = {"keyid": key.fingerprint, "sig": base64.b64encode(sig).decode(),
                             "publicKey": key.public_line()}  # fmt: skip
    kept = [s for s in env["signatures"]
            if isinstance(s, dict) and isinstance(s.get("sig"), str) and s.get("keyid") != key.fingerprint]
    env["signatures"] = [*kept, entry]
    return env


_REMAKE = ("it must be the JSON envelope kit wrote (`kit sign` for a manifest, `kit run` for a bundle's provenance): "
           "get the signer's own file again, or sign again")


def parse_envelope(data: bytes, source: str) -> tuple[dict[str, Any], bytes]:
    """The envelope (untrusted JSON: its signature entries are checked one by one) and its payload bytes."""
    try:
        env = loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SignatureError(f"{source}: not a JSON signature envelope ({e})", hint=_REMAKE) from None
    if not isinstance(env, dict) or not isinstance(env.get("signatures"), list) or "payload" not in env:
        raise SignatureError(f"{source}: not a DSSE envelope (needs payloadType, payload, signatures)", hint=_REMAKE)
    if env.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureError(f"{source}: payloadType {env.get('payloadType')!r}, expected {PAYLOAD_TYPE!r}")
    if not isinstance(env["payload"], str):
        raise SignatureError(f"{source}: payload must be a base64 string")
    return env, b64decode(env["payload"])


def subject_digests(stmt: Mapping[str, object]) -> dict[str, str]:
    """``{name: sha256}`` of an in-toto Statement's subjects (malformed entries are skipped)."""
    out: dict[str, str] = {}
    subjects = stmt.get("subject", [])
    for s in subjects if isinstance(subjects, list) else []:
        if isinstance(s, dict) and isinstance(s.get("digest"), dict) and "sha256" in s["digest"]:
            out[str(s.get("name"))] = str(s["digest"]["sha256"])
    return out


def subject_annotations(stmt: Mapping[str, object]) -> dict[str, dict[str, object]]:
    """``{name: annotations}`` of the subjects that carry an annotations map."""
    out: dict[str, dict[str, object]] = {}
    subjects = stmt.get("subject", [])
    for s in subjects if isinstance(subjects, list) else []:
        if isinstance(s, dict) and isinstance(s.get("annotations"), dict):
            out[str(s.get("name"))] = s["annotations"]
    return out
