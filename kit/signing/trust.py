"""Trust: which keys may sign for which namespace, read from OpenSSH ``allowed_signers`` files.

The files are read exactly as ``ssh-keygen -Y verify`` reads them (``kit.allowed_signers``): a malformed
line is skipped and never trusts anything. Unlike ssh-keygen, kit says so: every skipped line is kept
in ``Verified.problems`` and named in refusals and notices. A trust file that cannot be read (not UTF-8,
over 1 MiB, a directory or special file) is a SignatureError naming it (exit 4); a missing one is a
UsageError (exit 2).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kit import allowed_signers
from kit.allowed_signers import SignerEntry
from kit.errors import SignatureError, UsageError
from kit.plumbing.files import TooLarge, append_line, read_bounded
from kit.plumbing.jsontypes import loads
from kit.signing.dsse import PAYLOAD_TYPE, STATEMENT_TYPE, b64decode, pae
from kit.signing.keys import fingerprint, parse_public_key

NS_MANIFEST = "kit-manifest"
NS_BUNDLE = "kit-bundle"
MAX_TRUST_BYTES = 1 << 20


def user_trust_file() -> Path:
    """``$XDG_CONFIG_HOME/kit/allowed_signers`` (default ``~/.config/kit/allowed_signers``): the user's policy."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "kit" / "allowed_signers"


def default_trust_files() -> list[Path]:
    """The user's own trust file, when it exists.

    Trust anchors come only from the user: never from a file found beside or above the manifest or bundle
    being checked (whoever hands over content could hand over its trust file too)."""
    user = user_trust_file()
    return [user] if user.exists() else []


def policy_files(explicit: Sequence[Path]) -> list[Path]:
    """The trust files a decision uses: the command line's (``trust_policy``), else the user's own."""
    return list(explicit) or default_trust_files()


def trust_policy(added: Sequence[Path], only: Sequence[Path] = ()) -> list[Path]:
    """The trust files a command line names: ``--trust FILE`` adds to the user's own policy (its file first,
    when it exists), ``--trust-only FILE`` replaces it (then ``--trust`` files add to those); neither: ``[]``,
    which ``policy_files`` reads as the user's own. Each file once."""
    files = [*only, *added] if only else [*default_trust_files(), *added] if added else []
    return list(dict.fromkeys(files))


def trust_flags(files: Sequence[Path]) -> list[str]:
    """The flags that give exactly the policy ``files`` (a ``trust_policy`` answer) again, paths absolute:
    ``--trust`` for each file beyond the user's own when the list starts with it, else ``--trust-only``."""
    if not files:
        return []
    if files[0] == user_trust_file():
        return [a for f in files[1:] for a in ("--trust", str(f.resolve()))]
    return [a for f in files for a in ("--trust-only", str(f.resolve()))]


def describe_policy(files: Sequence[Path]) -> str:
    if files:
        return "trust file(s) " + ", ".join(str(f) for f in files)
    return f"no trust file (none at {user_trust_file()}, no --trust given)"


def add_user_trust(line: str) -> Path:
    """Append one line to the user's trust file (created when missing; a symlink is not followed)."""
    path = user_trust_file()
    prefix = b""
    try:
        old = read_bounded(path, MAX_TRUST_BYTES)
        if old and not old.endswith(b"\n"):
            prefix = b"\n"
    except FileNotFoundError:
        prefix = b"# kit trust policy (OpenSSH allowed_signers format): who may sign what, per namespace.\n"
    except (OSError, TooLarge) as e:
        raise UsageError(f"cannot read the trust file {path}: {e}", hint="fix or remove it") from None
    try:
        append_line(path, prefix + line.rstrip("\n").encode() + b"\n")
    except OSError as e:
        raise UsageError(f"cannot add to the trust file {path}: {e.strerror or e}",
                         hint="make it a writable regular file") from None
    return path


def read_trust_file(path: Path) -> str:
    """The text of one trust file: at most 1 MiB of UTF-8 in a regular file, else an error naming it."""
    try:
        data = read_bounded(path, MAX_TRUST_BYTES)
    except FileNotFoundError:
        raise UsageError(f"trust file {path} does not exist",
                         hint="check the path (a relative one is taken from where kit runs): an allowed_signers file, "
                         "one line per trusted key, as `kit keygen` prints it") from None
    except TooLarge:
        raise SignatureError(f"trust file {path} is larger than {MAX_TRUST_BYTES} bytes",
                             hint="an allowed_signers file holds one short line per key") from None
    except OSError as e:
        raise SignatureError(f"trust file {path} cannot be read: {e.strerror or e}",
                             hint="give a regular file in allowed_signers format") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SignatureError(f"trust file {path} is not UTF-8 text (byte {e.start})",
                             hint="an allowed_signers file is text: save it as UTF-8") from None


def load_trust(files: Iterable[Path]) -> list[SignerEntry]:
    """Every entry of every trust file, in order (malformed lines included, with their ``problem``)."""
    entries: list[SignerEntry] = []
    for f in files:
        entries += allowed_signers.parse(read_trust_file(f), str(f))
    return entries


def trust_problems(trust: Iterable[SignerEntry]) -> list[str]:
    """The skipped (malformed) lines, each as 'file:line: problem (fix)'."""
    return [f"{e.message} ({e.hint})" if e.hint else e.message for e in allowed_signers.problems(trust)]


@dataclass
class Verified:
    """Outcome of checking an envelope's signatures."""

    body: bytes
    statement: dict[str, Any]
    trusted: list[tuple[str, str, str]] = field(default_factory=list)  # (principal, fingerprint, source)
    untrusted: list[tuple[str, str]] = field(default_factory=list)  # (fingerprint, self-declared comment)
    invalid: list[str] = field(default_factory=list)  # keyids whose signature did not verify
    refusals: list[str] = field(default_factory=list)  # why each trust line did not allow an untrusted key
    problems: list[str] = field(default_factory=list)  # trust lines skipped as malformed (they trust nothing)


def _principal(entry: SignerEntry) -> str:
    return entry.principals.split(b",", 1)[0].decode("utf-8", "surrogateescape")


def _verifies(key: Ed25519PublicKey, sig: bytes, message: bytes) -> bool:
    try:
        key.verify(sig, message)
    except InvalidSignature:
        return False
    return True


def _hinted_key(hint: object) -> Ed25519PublicKey | None:
    try:
        return parse_public_key(hint) if isinstance(hint, str) else None
    except SignatureError:
        return None


def _check_one(s: Mapping[str, Any], message: bytes, trust: Sequence[SignerEntry], namespace: str,
               at: datetime, out: Verified) -> None:
    """Any listed key counts, not just the one the entry names; the entry's own key makes it 'untrusted'."""
    sig = b64decode(s["sig"])
    hint = s.get("publicKey")
    named = _hinted_key(hint)
    candidates = [k for k in (named, *(e.key for e in trust)) if k is not None]
    seen: set[bytes] = set()
    for key in candidates:
        raw = key.public_bytes_raw()
        if raw in seen or not _verifies(key, sig, message):
            continue
        seen.add(raw)
        allowed = allowed_signers.decide(trust, key, None, namespace, at)
        if allowed:
            out.trusted.append((_principal(allowed[0]), fingerprint(key), allowed[0].source))
            return
    if named is None or named.public_bytes_raw() not in seen:
        out.invalid.append(str(s.get("keyid", "?")))
        return
    parts = str(hint).split(maxsplit=2)
    out.untrusted.append((fingerprint(named), parts[2] if len(parts) > 2 else ""))
    out.refusals += allowed_signers.explain(trust, named, None, namespace, at)


def check_envelope(env: Mapping[str, Any], body: bytes, trust: Sequence[SignerEntry], namespace: str,
                   at: datetime | None = None) -> Verified:
    """Check every signature under the key it names, and whether ``trust`` allows that key for ``namespace``
    at ``at`` (now by default), with OpenSSH's ``allowed_signers`` semantics."""
    try:
        stmt = loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise SignatureError("signed payload is not JSON") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise SignatureError(f"signed payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    out = Verified(body=body, statement=stmt, problems=trust_problems(trust))
    message = pae(PAYLOAD_TYPE, body)
    when = at or datetime.now(UTC)
    for s in env["signatures"]:
        if not isinstance(s, dict) or not isinstance(s.get("sig"), str):
            raise SignatureError("malformed signature entry in envelope")
        _check_one(s, message, trust, namespace, when, out)
    return out
