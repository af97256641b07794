"""Signing: OpenSSH Ed25519 keys, DSSE envelopes, and trust in git's ``allowed_signers`` format.

A signature is a DSSE envelope (https://github.com/secure-systems-lab/dsse) whose payload is an
in-toto Statement v1 naming the signed file by its sha256. The envelope signs the exact payload
bytes through DSSE's pre-authentication encoding (PAE), so no canonicalisation is involved.
Researchers sign with their existing ``ssh-ed25519`` keys. Each signature entry carries the
signer's public key as a hint; a signature only counts when its key is listed in a trust file
for the right namespace (``kit-manifest`` for manifests, ``kit-bundle`` for result bundles).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from kit.errors import SignatureError, UsageError

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MANIFEST_PREDICATE = "urn:kit:manifest-approval:1"
NS_MANIFEST = "kit-manifest"
NS_BUNDLE = "kit-bundle"
SIG_SUFFIX = ".sig"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def _b64decode(s: str) -> bytes:
    """DSSE allows standard and URL-safe base64, with or without padding."""
    s = s.strip()
    padded = s + "=" * (-len(s) % 4)
    try:
        if "-" in s or "_" in s:
            return base64.urlsafe_b64decode(padded)
        return base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError) as e:
        raise SignatureError(f"bad base64 in signature envelope: {e}") from None


# --------------------------------------------------------------------------- keys


def public_key_line(pub: Ed25519PublicKey, comment: str = "") -> str:
    line = pub.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}".strip()


def fingerprint(pub: Ed25519PublicKey) -> str:
    """The OpenSSH fingerprint, as `ssh-keygen -lf` prints it (SHA256:...)."""
    blob = base64.b64decode(public_key_line(pub).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def parse_public_key(line: str) -> Ed25519PublicKey:
    parts = line.strip().split()
    if len(parts) < 2 or parts[0] != "ssh-ed25519":
        raise SignatureError(f"not an ssh-ed25519 public key: {line.strip()[:60]!r}")
    try:
        key = serialization.load_ssh_public_key(f"{parts[0]} {parts[1]}".encode())
    except (ValueError, binascii.Error) as e:
        raise SignatureError(f"unreadable ssh-ed25519 public key: {e}") from None
    assert isinstance(key, Ed25519PublicKey)
    return key


@dataclass(frozen=True)
class SigningKey:
    private: Ed25519PrivateKey
    comment: str
    path: Path

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public)

    def public_line(self) -> str:
        return public_key_line(self.public, self.comment)


def generate_key(path: Path, comment: str, *, overwrite: bool = False) -> SigningKey:
    """Write a new OpenSSH Ed25519 key pair to ``path`` and ``path.pub`` (private key mode 0600)."""
    if path.exists() and not overwrite:
        raise UsageError(f"{path} already exists", hint="choose another path with -o, or remove the old key")
    key = Ed25519PrivateKey.generate()
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
    )
    signing = SigningKey(key, comment, path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        Path(f"{path}.pub").write_text(signing.public_line() + "\n")
    except OSError as e:
        raise UsageError(f"cannot write the key to {path}: {e.strerror or e}",
                         hint="choose a writable path with -o") from None
    return signing


def _load_private(data: bytes, pw: bytes | None) -> object:
    if b"OPENSSH PRIVATE KEY" in data:
        return serialization.load_ssh_private_key(data, password=pw)
    return serialization.load_pem_private_key(data, password=pw)


def load_signing_key(path: Path, passphrase: str | None = None) -> SigningKey:
    """Load an OpenSSH (or PEM) Ed25519 private key, e.g. ~/.ssh/id_ed25519."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such key file", hint="make one with `kit keygen -o FILE`") from None
    pw = passphrase.encode() if passphrase is not None else None
    key: object
    try:
        key = _load_private(data, pw)
    except TypeError as e:
        if pw is not None and "not encrypted" in str(e).lower():
            key = _load_private(data, None)  # a passphrase was set for another key; this one has none
        else:
            raise UsageError(
                f"{path}: the key is protected by a passphrase", hint="set KIT_KEY_PASSPHRASE to unlock it"
            ) from None
    except ValueError as e:
        if pw is not None and ("checksum" in str(e).lower() or "decrypt" in str(e).lower()):
            raise UsageError(f"{path}: wrong passphrase (KIT_KEY_PASSPHRASE)") from None
        raise UsageError(f"{path}: not a readable private key ({e})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise UsageError(
            f"{path}: only ssh-ed25519 keys can sign (this is a {type(key).__name__})",
            hint="make a dedicated key with `kit keygen` or `ssh-keygen -t ed25519`",
        )
    comment = ""
    pub = Path(f"{path}.pub")
    if pub.exists():
        parts = pub.read_text().split(maxsplit=2)
        comment = parts[2].strip() if len(parts) > 2 else ""
    return SigningKey(key, comment, path)


# --------------------------------------------------------------------------- trust


@dataclass(frozen=True)
class TrustedKey:
    principals: tuple[str, ...]
    key: Ed25519PublicKey
    namespaces: tuple[str, ...] | None
    valid_after: datetime | None
    valid_before: datetime | None
    source: str

    def allows(self, namespace: str, at: datetime) -> bool:
        if self.namespaces is not None and not any(_glob(p, namespace) for p in self.namespaces):
            return False
        if self.valid_after is not None and at < self.valid_after:
            return False
        return not (self.valid_before is not None and at >= self.valid_before)


def _glob(pattern: str, value: str) -> bool:
    return re.fullmatch(re.escape(pattern).replace(r"\*", ".*").replace(r"\?", "."), value) is not None


def _ssh_time(s: str) -> datetime:
    s = s.rstrip("Zz")
    for fmt in ("%Y%m%d%H%M%S", "%Y%m%d%H%M", "%Y%m%d"):
        try:
            return datetime.strptime(s, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise ValueError(f"bad time {s!r}")


_KNOWN_OPTIONS = {"cert-authority", "namespaces", "valid-after", "valid-before"}
_OPT_RE = re.compile(r'([A-Za-z-]+)(?:="([^"]*)"|=([^\s,]*))?')


def parse_allowed_signers(text: str, source: str) -> list[TrustedKey]:
    """Parse git's/ssh-keygen's allowed_signers format (ssh-ed25519 keys; others are skipped)."""
    keys: list[TrustedKey] = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            principals, rest = line.split(maxsplit=1)
        except ValueError:
            raise SignatureError(f"{source}:{n}: expected 'principals [options] ssh-ed25519 KEY'") from None
        options: dict[str, str | None] = {}
        # options come before the key type, separated by commas, no spaces outside quotes
        if not rest.startswith(("ssh-", "ecdsa-", "sk-")):
            m = re.match(r'((?:[^\s"]|"[^"]*")+)\s+(.*)$', rest)
            if not m:
                raise SignatureError(f"{source}:{n}: cannot parse options")
            for om in _OPT_RE.finditer(m.group(1)):
                name = om.group(1).lower()
                if name not in _KNOWN_OPTIONS:
                    raise SignatureError(
                        f"{source}:{n}: unknown option {om.group(1)!r} (allowed: {', '.join(sorted(_KNOWN_OPTIONS))})",
                        hint="a misspelt option would otherwise widen the key's trust; fix the line",
                    )
                options[name] = om.group(2) if om.group(2) is not None else om.group(3)
            rest = m.group(2)
        if not rest.startswith("ssh-ed25519 "):
            continue
        if "cert-authority" in options:
            continue
        try:
            va = _ssh_time(options["valid-after"] or "") if options.get("valid-after") else None
            vb = _ssh_time(options["valid-before"] or "") if options.get("valid-before") else None
        except ValueError as e:
            raise SignatureError(f"{source}:{n}: {e}") from None
        ns = options.get("namespaces")
        try:
            key = parse_public_key(rest)
        except SignatureError as e:
            raise SignatureError(f"{source}:{n}: {e.message}") from None
        keys.append(
            TrustedKey(
                principals=tuple(principals.split(",")),
                key=key,
                namespaces=tuple(ns.split(",")) if ns else None,
                valid_after=va,
                valid_before=vb,
                source=f"{source}:{n}",
            )
        )
    return keys


def user_trust_file() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kit" / "allowed_signers"


def load_trust(files: list[Path]) -> list[TrustedKey]:
    keys: list[TrustedKey] = []
    for f in files:
        try:
            keys += parse_allowed_signers(f.read_text(), str(f))
        except FileNotFoundError:
            raise UsageError(f"trust file {f} does not exist") from None
    return keys


# --------------------------------------------------------------------------- envelopes


def statement(subjects: dict[str, str], predicate_type: str, predicate: Mapping[str, object]) -> bytes:
    """An in-toto Statement v1 (deterministic JSON bytes) over ``{name: sha256}``."""
    stmt = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": n, "digest": {"sha256": d}} for n, d in sorted(subjects.items())],
        "predicateType": predicate_type,
        "predicate": predicate,
    }
    return json.dumps(stmt, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign_payload(body: bytes, key: SigningKey, envelope: dict[str, Any] | None = None) -> dict[str, Any]:
    """Return a DSSE envelope over ``body``, adding ``key``'s signature to ``envelope`` if given."""
    env = envelope or {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(body).decode(), "signatures": []}
    sig = key.private.sign(pae(env["payloadType"], body))
    entry = {"keyid": key.fingerprint, "sig": base64.b64encode(sig).decode(), "publicKey": key.public_line()}
    env["signatures"] = [s for s in env["signatures"] if s.get("keyid") != key.fingerprint] + [entry]
    return env


@dataclass
class Verified:
    """Outcome of checking an envelope's signatures."""

    body: bytes
    statement: dict[str, Any]
    trusted: list[tuple[str, str, str]] = field(default_factory=list)  # (principal, fingerprint, source)
    untrusted: list[tuple[str, str]] = field(default_factory=list)  # (fingerprint, self-declared comment)
    invalid: list[str] = field(default_factory=list)  # keyids whose signature did not verify


def parse_envelope(data: bytes, source: str) -> tuple[dict[str, Any], bytes]:
    try:
        env = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SignatureError(f"{source}: not a JSON signature envelope ({e})") from None
    if not isinstance(env, dict) or not isinstance(env.get("signatures"), list) or "payload" not in env:
        raise SignatureError(f"{source}: not a DSSE envelope (needs payloadType, payload, signatures)")
    if env.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureError(f"{source}: payloadType {env.get('payloadType')!r}, expected {PAYLOAD_TYPE!r}")
    if not isinstance(env["payload"], str):
        raise SignatureError(f"{source}: payload must be a base64 string")
    return env, _b64decode(env["payload"])


def check_envelope(env: dict[str, Any], body: bytes, trust: list[TrustedKey], namespace: str) -> Verified:
    """Check every signature against the trusted keys (any key, not just the one the keyid hints at)."""
    try:
        stmt = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SignatureError("signed payload is not JSON") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise SignatureError(f"signed payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    out = Verified(body=body, statement=stmt)
    message = pae(PAYLOAD_TYPE, body)
    now = datetime.now(UTC)
    for s in env["signatures"]:
        if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
            raise SignatureError("malformed signature entry in envelope")
        sig = _b64decode(s["sig"])
        matched = False
        for tk in trust:
            if not tk.allows(namespace, now):
                continue
            try:
                tk.key.verify(sig, message)
            except InvalidSignature:
                continue
            out.trusted.append((tk.principals[0], fingerprint(tk.key), tk.source))
            matched = True
            break
        if matched:
            continue
        hint = s.get("publicKey")
        if isinstance(hint, str):
            try:
                pub = parse_public_key(hint)
                pub.verify(sig, message)
                parts = hint.split(maxsplit=2)
                out.untrusted.append((fingerprint(pub), parts[2] if len(parts) > 2 else ""))
                continue
            except (SignatureError, InvalidSignature):
                pass
        out.invalid.append(str(s.get("keyid", "?")))
    return out


def subject_digests(stmt: Mapping[str, object]) -> dict[str, str]:
    """``{name: sha256}`` of an in-toto Statement's subjects (malformed entries are skipped)."""
    out: dict[str, str] = {}
    subjects = stmt.get("subject", [])
    for s in subjects if isinstance(subjects, list) else []:
        if isinstance(s, dict) and isinstance(s.get("digest"), dict) and "sha256" in s["digest"]:
            out[str(s.get("name"))] = str(s["digest"]["sha256"])
    return out


# --------------------------------------------------------------------------- manifests


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
    env = sign_payload(body, key, envelope)
    sig_path.write_text(json.dumps(env, indent=2) + "\n")
    return sig_path, len(env["signatures"])


@dataclass(frozen=True)
class ManifestTrust:
    """Who vouched for a manifest; recorded in every bundle."""

    signed: bool
    signers: tuple[tuple[str, str, str], ...]  # (principal, fingerprint, trust source)
    allow_unsigned: bool = False
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "signed": self.signed,
            "signers": [{"principal": p, "fingerprint": f, "trusted_by": s} for p, f, s in self.signers],
            "allow_unsigned": self.allow_unsigned,
            "note": self.note,
        }


def default_trust_files(manifest: Path, project_root: Path | None) -> list[Path]:
    files = []
    user = user_trust_file()
    if user.exists():
        files.append(user)
    if project_root is not None and (project_root / "allowed_signers").exists():
        files.append(project_root / "allowed_signers")
    return files


def verify_manifest(manifest: Path, raw: bytes, trust_files: list[Path], sig: bytes | None = None) -> ManifestTrust:
    """Verify the detached signature of ``raw``; raise SignatureError unless a trusted key signed it.

    ``sig`` is the envelope's bytes (read from ``MANIFEST.sig`` when not given), so that a caller that
    keeps what it read (e.g. to copy into a bundle) verifies exactly those bytes.
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
        who = "; ".join(f"{fp} (key comment {c!r}, self-declared)" for fp, c in result.untrusted)
        bad = f"; {len(result.invalid)} signature(s) did not verify" if result.invalid else ""
        files = ", ".join(str(f) for f in trust_files)
        raise SignatureError(
            f"{manifest}: no signature by a trusted key. Signed by: {who or 'nobody valid'}{bad}; "
            f"not listed (for namespace {NS_MANIFEST}) in the trust file(s): {files}",
            hint="if you trust that key, add a line 'PRINCIPAL namespaces=\"kit-manifest\" ssh-ed25519 KEY' "
            "to your allowed_signers file",
        )
    return ManifestTrust(signed=True, signers=tuple(result.trusted))
