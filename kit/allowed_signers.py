"""OpenSSH ``allowed_signers`` files, read exactly as ``ssh-keygen -Y verify`` (OpenSSH 9.2) reads them.

Format (ssh-keygen(1), ALLOWED SIGNERS): ``principals [options] keytype base64-key [comment]``, one per line.
The behaviours matched, each from the OpenSSH source it was read in (our own Python, no code copied):

- sshsig.c ``sshsig_check_allowed_keys``/``check_allowed_keys_line``: lines are read with getline (split on
  ``\\n`` only, so ``\\r`` stays in the line); a malformed line is *skipped* (logged, never fatal); the first
  line that allows the key wins; a ``cert-authority`` line only matches certificates (kit signs with plain
  keys, so it never matches); the namespace check is ``match_pattern_list(ns, namespaces) == 1`` (so
  ``namespaces=""`` allows nothing); ``at < valid-after`` or ``at > valid-before`` rejects.
- sshsig.c ``parse_principals_key_and_options``: leading blanks, ``#`` comment lines, principals token,
  key first, and only if that fails options then key; ``sshsigopt_parse``: options are case-insensitive
  prefixes (``cert-authority`` flag, ``namespaces=``/``valid-after=``/``valid-before=`` which *must* be
  quoted), repeated clauses, unknown options, a trailing comma, time 0 and ``valid-before <= valid-after``
  all make the line invalid.
- misc.c ``strdelimw`` (principals may be quoted; the quote ends the token), ``opt_dequote`` (``\\"``
  inside quotes); authfile.c ``sshkey_advance_past_options``; sshkey.c ``sshkey_read``/``sshkey_from_blob``
  (type name, base64 blob whose type must agree, 32-byte key, no trailing data).
- Times (misc.c ``parse_absolute_time``: YYYYMMDD[HHMM[SS]], ``Z``/``UTC`` = UTC, else *local* standard
  time), patterns (match.c: ``*``, ``?``, ``!`` wins) and base64 (``b64_pton``) live in kit.plumbing.sshtext.

Everything is handled as bytes (UTF-8 with surrogateescape), like the C code.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kit.errors import SignatureError
from kit.plumbing.sshtext import ascii_lower, b64_pton, match_pattern_list, parse_time

ED25519 = "ssh-ed25519"
# key type names sshkey_read knows (OpenSSH 9.2 built with OpenSSL); only ssh-ed25519 is usable by kit
_PLAIN_TYPES = (
    "ssh-ed25519",
    "sk-ssh-ed25519@openssh.com",
    "ssh-rsa",
    "rsa-sha2-256",
    "rsa-sha2-512",
    "ssh-dss",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "sk-ecdsa-sha2-nistp256@openssh.com",
)
_KEY_TYPES = frozenset(
    _PLAIN_TYPES + tuple(t.removesuffix("@openssh.com") + "-cert-v01@openssh.com" for t in _PLAIN_TYPES)
)
_DELIM = b" \t\r\n"  # misc.c WHITESPACE
_BLANK = b" \t"
_FORMAT = "principals [options] ssh-ed25519 KEY [comment]"


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def _dec(b: bytes) -> str:
    return b.decode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- keys (sshkey.c)


def _get_string(blob: bytes, pos: int) -> tuple[bytes, int] | None:
    if pos + 4 > len(blob):
        return None
    n = int.from_bytes(blob[pos : pos + 4], "big")
    if pos + 4 + n > len(blob):
        return None
    return blob[pos + 4 : pos + 4 + n], pos + 4 + n


def _ed25519_blob(blob: bytes) -> bytes | None:
    """The 32-byte public key of an ssh-ed25519 key blob, or None (type mismatch, bad length, trailing data)."""
    first = _get_string(blob, 0)
    if first is None or b"\0" in first[0]:
        return None
    ktype, pos = first
    if ktype != b"ssh-ed25519" and ascii_lower(ktype) != b"ed25519":  # sshkey_type_from_name allows the short name
        return None
    pk = _get_string(blob, pos)
    if pk is None or len(pk[0]) != 32 or pk[1] != len(blob):
        return None
    return pk[0]


def _read_key(s: bytes) -> tuple[str, bytes | None] | None:
    """sshkey_read: (type name, ed25519 public bytes or None for other types), or None where it fails."""
    space = min((i for i in (s.find(b" "), s.find(b"\t")) if i >= 0), default=-1)
    if space < 0:
        return None
    ktype = _dec(s[:space])
    if ktype not in _KEY_TYPES:
        return None
    rest = s[space:].lstrip(_BLANK)
    if not rest:
        return None
    if ktype != ED25519:
        return ktype, None  # parsed no further: such a line can never allow an ssh-ed25519 signature
    end = min((i for i in (rest.find(b" "), rest.find(b"\t")) if i >= 0), default=len(rest))
    blob = b64_pton(rest[:end])
    pk = None if blob is None else _ed25519_blob(blob)
    return None if pk is None else (ktype, pk)


# --------------------------------------------------------------------------- lines (sshsig.c, misc.c)


def _strdelimw(s: bytes) -> tuple[bytes, bytes | None] | None:
    """misc.c strdelimw: the first token (a quote starts a quoted part) and the rest; None on an open quote."""
    idx = [i for i in (s.find(bytes([c])) for c in _DELIM + b'"') if i >= 0]
    if not idx:
        return s, None
    i = min(idx)
    if s[i] == 34:
        s = s[:i] + s[i + 1 :]
        j = s.find(b'"', i)
        if j < 0:
            return None
        return s[:j], s[j + 1 :].lstrip(_DELIM)
    return s[:i], s[i + 1 :].lstrip(_DELIM)


def _past_options(s: bytes) -> int | None:
    """authfile.c sshkey_advance_past_options: index of the first unquoted blank; None on an open quote."""
    quoted, i = False, 0
    while i < len(s) and (quoted or s[i] not in _BLANK):
        if s[i] == 92 and s[i + 1 : i + 2] == b'"':
            i += 1
        elif s[i] == 34:
            quoted = not quoted
        i += 1
    return None if (i >= len(s) and quoted) else i


def _dequote(s: bytes, pos: int) -> tuple[bytes, int]:
    if s[pos : pos + 1] != b'"':
        raise ValueError("the value must be in double quotes")
    out, pos = bytearray(), pos + 1
    while pos < len(s) and s[pos] != 34:
        if s[pos] == 92 and s[pos + 1 : pos + 2] == b'"':
            pos += 1
        out.append(s[pos])
        pos += 1
    if pos >= len(s):
        raise ValueError("missing end quote")
    return bytes(out), pos + 1


@dataclass(frozen=True)
class _Options:
    cert_authority: bool = False
    namespaces: bytes | None = None
    valid_after: int | None = None
    valid_before: int | None = None


def _options(s: bytes) -> _Options:
    """sshsig.c sshsigopt_parse; raises ValueError with OpenSSH's reason."""
    ca, ns = False, None
    times: dict[str, int] = {}
    pos = 0
    while pos < len(s) and s[pos] not in _BLANK:
        low = ascii_lower(s[pos : pos + 16])
        if low.startswith(b"cert-authority"):
            ca, pos = True, pos + 14
        elif low.startswith(b"namespaces="):
            if ns is not None:
                raise ValueError('multiple "namespaces" clauses')
            ns, pos = _dequote(s, pos + 11)
        else:
            name = next((t for t in ("valid-after", "valid-before") if low.startswith(t.encode() + b"=")), None)
            if name is not None:
                if name in times:
                    raise ValueError(f'multiple "{name}" clauses')
                value, pos = _dequote(s, pos + len(name) + 1)
                t = parse_time(value)
                if not t:
                    raise ValueError(f'invalid "{name}" time {_dec(value)!r} (use YYYYMMDD[HHMM[SS]] and Z for UTC)')
                times[name] = t
        if pos >= len(s) or s[pos] in _BLANK:
            break
        if s[pos] != 44:
            raise ValueError(f"unknown key option at {_dec(s[pos:])[:30]!r}")
        pos += 1
        if pos >= len(s):
            raise ValueError("unexpected end-of-options (trailing comma)")
    va, vb = times.get("valid-after"), times.get("valid-before")
    if va is not None and vb is not None and vb <= va:
        raise ValueError('"valid-before" time is before "valid-after"')
    return _Options(ca, ns, va, vb)


# --------------------------------------------------------------------------- entries and policy


@dataclass(frozen=True)
class SignerEntry:
    """One non-blank, non-comment line. ``problem`` is set where OpenSSH would skip the line as invalid;
    ``key`` is set only for a valid plain ssh-ed25519 line (the only kind that can allow a kit signature)."""

    source: str  # "path:line"
    principals: bytes
    key_type: str  # "" when no key could be read
    public_bytes: bytes | None
    cert_authority: bool = False
    namespaces: bytes | None = None  # None: the option is absent (any namespace)
    valid_after: int | None = None  # seconds since the epoch
    valid_before: int | None = None
    problem: str | None = None
    hint: str | None = None

    @property
    def key(self) -> Ed25519PublicKey | None:
        if self.public_bytes is None or self.problem is not None or self.cert_authority:
            return None
        return Ed25519PublicKey.from_public_bytes(self.public_bytes)

    def error(self) -> SignatureError:
        return SignatureError(f"{self.source}: {self.problem}", hint=self.hint)

    def refusal(self, key: Ed25519PublicKey, identity: str | None, namespace: str, at: datetime) -> str | None:
        """Why this line does not allow ``key`` (None: it does), checked in OpenSSH's order."""
        if identity is not None and match_pattern_list(_enc(identity), self.principals) != 1:
            return f"{self.source}: principals {_dec(self.principals)!r} do not match {identity!r}"
        if self.problem is not None:
            return f"{self.source}: skipped: {self.problem}"
        if self.cert_authority or self.public_bytes != key.public_bytes_raw():
            return f"{self.source}: another key"
        if self.namespaces is not None and match_pattern_list(_enc(namespace), self.namespaces) != 1:
            return f"{self.source}: namespace {namespace!r} not in namespaces={_dec(self.namespaces)!r}"
        now = epoch_seconds(at)
        if self.valid_after is not None and now < self.valid_after:
            return f"{self.source}: key not yet valid (valid-after {_utc(self.valid_after)})"
        if self.valid_before is not None and now > self.valid_before:
            return f"{self.source}: key expired (valid-before {_utc(self.valid_before)})"
        return None


def epoch_seconds(at: datetime) -> int:
    if at.tzinfo is None:
        raise ValueError("a verification time must be timezone-aware")
    return math.floor(at.timestamp())


def _utc(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _parse_line(raw: bytes, where: str) -> SignerEntry | None:
    cp = raw.lstrip(_DELIM)  # OpenSSH >= 9.3 also skips CR/LF here; 9.2 skips such a line as invalid
    if not cp or cp.startswith(b"#"):
        return None
    tok = _strdelimw(cp)
    if tok is None or tok[1] is None:
        what = "an unclosed quote in the principals" if tok is None else "no key after the principals"
        return SignerEntry(where, b"" if tok is None else tok[0], "", None,
                           problem=f"invalid line: {what}", hint=f"write '{_FORMAT}'")  # fmt: skip
    principals, rest = tok[0], tok[1]

    def bad(problem: str, hint: str = f"write '{_FORMAT}'", ktype: str = "") -> SignerEntry:
        return SignerEntry(where, principals, ktype, None, problem=problem, hint=hint)

    opts, read = b"", _read_key(rest)
    if read is None:
        end = _past_options(rest)
        if end is None:
            return bad("invalid options: unclosed quote")
        if end >= len(rest) or not rest[end:].strip(_DELIM):
            return bad("missing key", f"put the key after the options: '{_FORMAT}'")
        opts, read = rest[:end], _read_key(rest[end + 1 :].lstrip(_BLANK))
        if read is None:
            word = _dec(rest[end + 1 :].lstrip(_BLANK).split(maxsplit=1)[0])
            return bad(f"invalid key (after options {_dec(opts)!r}, found {word[:40]!r})",
                       "options are comma-separated with no spaces outside quotes; the key must be "
                       "'ssh-ed25519 BASE64' as in the .pub file")  # fmt: skip
    ktype, pk = read
    try:
        o = _options(opts)
    except ValueError as e:
        return bad(f"bad options: {e}",
                   'use cert-authority, namespaces="a,b", valid-after="YYYYMMDD[HHMM[SS]]Z", '
                   'valid-before="..." (values in double quotes, comma-separated, no spaces)', ktype)  # fmt: skip
    return SignerEntry(where, principals, ktype, pk, o.cert_authority, o.namespaces, o.valid_after, o.valid_before)


def parse(text: str, source: str, *, strict: bool = False) -> list[SignerEntry]:
    """Every non-blank, non-comment line of an allowed_signers file, in order.

    Like OpenSSH, a malformed line is kept as an entry with ``problem`` set and never allows anything; with
    ``strict`` the first such line raises its SignatureError (naming ``source:line`` and the fix) instead.
    Times without ``Z`` are read in the process's local time zone now, as ssh-keygen reads them."""
    entries: list[SignerEntry] = []
    lines = _enc(text).split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # text ending in a newline: no further line
    for n, line in enumerate(lines, 1):
        entry = _parse_line(line.split(b"\0", 1)[0] + b"\n", f"{source}:{n}")
        if entry is None:
            continue
        if strict and entry.problem is not None:
            raise entry.error()
        entries.append(entry)
    return entries


def problems(entries: Iterable[SignerEntry]) -> list[SignatureError]:
    """The lines OpenSSH would skip as invalid, as errors to show (or raise)."""
    return [e.error() for e in entries if e.problem is not None]


def decide(
    entries: Iterable[SignerEntry], key: Ed25519PublicKey, identity: str | None, namespace: str, at: datetime
) -> list[SignerEntry]:
    """The entries that allow ``key`` to sign for ``namespace`` at ``at`` (``identity`` None: any principal).

    Non-empty exactly where ``ssh-keygen -Y verify -I identity -n namespace -O verify-time=at`` accepts."""
    return [e for e in entries if e.refusal(key, identity, namespace, at) is None]


def explain(
    entries: Iterable[SignerEntry], key: Ed25519PublicKey, identity: str | None, namespace: str, at: datetime
) -> list[str]:
    """Why each entry does not allow the key (for a refusal message)."""
    return [r for e in entries if (r := e.refusal(key, identity, namespace, at)) is not None]
