"""The one redaction rule: every secret kit holds is replaced by ``***`` wherever text that came from outside kit
(a server's output, an HTTP error body, an SSE error event, a metric's labels, /server_info, an exception's message)
is written to a bundle file, a log or the terminal.

The secrets are the values of the variables kit passes through (``server.pass_env``) or sends as headers
(``load.request.header_env``, and the credentials after a header's scheme, e.g. ``Bearer``), the runner key's
passphrase, and those of every ``ServerSpec`` built: one set per process (``add_secrets``, ``secrets_from_env``),
which the load driver process builds again from its own environment (names reach it, never values). Each secret is
matched in every form a server is likely to echo it in: as is, JSON-escaped (``\\"``, ``\\/``, ``\\u00xx`` in either
hex case, any mixture), base64 (standard or urlsafe, padded or not, inside longer base64 at each alignment),
URL-encoded (``quote``, ``quote_plus``, either hex case) and hex (its UTF-8 bytes, either case: a dump of bytes);
forms shorter than MIN_DERIVED are left alone. Also masked: the value upper- or lower-cased, and, for a secret of
PREFIX_FROM characters or more, any prefix of at least half of it (a server that logs a token's first characters).
The mask
is always ``***``: neither the length nor any part of a secret shows.

A text cut from a longer one (a bounded read, a log's tail) may hold part of a secret at the cut: ``redact``'s
``cut_start`` / ``cut_end`` drop the ``reach()`` characters next to such a cut (a whole match there is masked).
``StreamRedactor`` redacts a stream that comes in pieces, holding back what could be the start of a secret.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import io
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import quote, quote_plus

MASK = "***"
MIN_DERIVED = 6  # encoded forms shorter than this are not redacted (they would hit ordinary text)
PREFIX_FROM = 12  # a secret this long is masked also where only its first half or more shows (a logged prefix)
PASSPHRASE_ENV = "KIT_KEY_PASSPHRASE"  # the runner key's passphrase (kit.bundle.provenance)
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9._~+-]*[ \t]+(\S(?:.*\S)?)\s*$", re.S)  # "Bearer TOKEN", "Basic B64"


def _b64_forms(raw: bytes) -> set[str]:
    """base64 of ``raw`` (standard and urlsafe, with and without padding), and the stretch of characters
    that encode only ``raw`` wherever it sits in a longer base64 text (at each of the 3 byte alignments)."""
    out: set[str] = set()
    n = len(raw)
    for k in range(3):
        enc = base64.b64encode(b"\0" * k + raw).decode()
        start, end = -(-8 * k // 6), (8 * (k + n)) // 6
        forms = {enc[start:end]} | ({enc, enc.rstrip("=")} if k == 0 else set())
        for f in forms:
            out |= {f, f.translate(str.maketrans("+/", "-_"))}
    return out


def secret_forms(value: str) -> set[str]:
    """The literal forms of a secret that redaction removes besides its JSON-escaped ones (``json_pattern``): the
    value itself, its base64 (standard and urlsafe, padded or not, also inside longer base64), URL-encoded (quote and
    quote_plus, either hex case), hex (either case) and json.dumps forms."""
    if not value:
        return set()
    derived = _b64_forms(value.encode()) | {value.encode().hex(), value.encode().hex().upper()}
    for q in (quote(value, safe=""), quote(value), quote_plus(value), quote_plus(value, safe="")):
        derived |= {q, re.sub(r"%[0-9A-F]{2}", lambda mo: mo.group(0).lower(), q)}
    derived |= {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1], value.upper(), value.lower()}
    return {value} | {f for f in derived if len(f) >= MIN_DERIVED}


def prefix_pattern(value: str) -> tuple[str, str] | None:
    """For a secret of PREFIX_FROM characters or more (a server that logs "token hf_secretval..." shows most of a
    short token): one pattern for every prefix of at least half of it (the shortest, then each next character
    optional in turn), and that shortest prefix (a text without it holds none of them)."""
    if len(value) < PREFIX_FROM:
        return None
    k = max(MIN_DERIVED, -(-len(value) // 2))
    rest = "".join(f"(?:{re.escape(c)}" for c in value[k:-1]) + ")?" * (len(value) - 1 - k)
    return re.escape(value[:k]) + rest, value[:k]


def _json_char(c: str) -> tuple[str, int]:
    """A pattern for one character as it may appear in a JSON string (as is, its short escape, \\uXXXX in either hex
    case, or the surrogate pair json.dumps writes), and the longest text it matches."""
    alts = {c, json.dumps(c)[1:-1]}
    if c == "/":
        alts.add("\\/")
    pats = [re.escape(a) for a in sorted(alts, key=lambda a: (-len(a), a))]
    if ord(c) < 0x10000:
        pats.append(r"\\u" + "".join(f"[{h}{h.upper()}]" if h.isalpha() else h for h in f"{ord(c):04x}"))
    return "(?:" + "|".join(pats) + ")", max(6, *(len(a) for a in alts))


def json_pattern(value: str) -> tuple[str, int]:
    """A pattern for ``value`` inside JSON text, each character in any of its escaped forms (any mixture: ``\\/``,
    ``\\u00xx``), and the longest text it matches."""
    parts = [_json_char(c) for c in value]
    return "".join(p for p, _ in parts), sum(n for _, n in parts)


@dataclass(frozen=True)
class Rule:
    """The compiled rule for a set of secrets (``pattern`` None: none)."""

    values: frozenset[str]
    pattern: re.Pattern[str] | None  # every form of every secret
    reach: int  # the longest text a secret's form can be, less one: what a cut may hide part of
    multiline: bool  # some form holds a line break (a line end is then no safe place to cut)
    # a quick first look (``may_hold``): the literal forms, and each secret's escaped pattern alone (one pattern
    # over all of them runs several times slower: Python's re skips ahead on one pattern's first characters only)
    literals: tuple[str, ...] = ()
    escaped: tuple[re.Pattern[str], ...] = ()

    def may_hold(self, text: str) -> bool:
        """False when ``text`` surely holds no secret (most texts: then ``pattern`` need not run)."""
        return any(f in text for f in self.literals) or (
            "\\" in text and any(e.search(text) is not None for e in self.escaped))


def compile_rule(values: Iterable[str]) -> Rule:
    kept = frozenset(v for v in values if v)
    if not kept:
        return Rule(kept, None, 0, False)
    alternatives: dict[str, int] = {}
    literals: set[str] = set()
    escaped = []
    for v in kept:
        pat, longest = json_pattern(v)
        alternatives[pat] = longest
        escaped.append(re.compile(pat))
        for f in secret_forms(v):
            alternatives[re.escape(f)] = len(f)
            literals.add(f)
        if (prefixes := prefix_pattern(v)) is not None:  # after the whole value and its forms at a position
            alternatives[prefixes[0]] = len(v) - 1
            literals.add(prefixes[1])
    ordered = sorted(alternatives, key=lambda p: (-alternatives[p], p))  # the longest form first at a position
    return Rule(kept, re.compile("|".join(ordered)), max(alternatives.values()) - 1,
                any("\n" in v or "\r" in v for v in kept), tuple(sorted(literals)), tuple(escaped))


_lock = threading.Lock()
_rule = compile_rule(())


def rule() -> Rule:
    return _rule


def add_secrets(values: Iterable[str]) -> None:
    """Add secrets to this process's set (from now on every redaction masks them)."""
    global _rule
    with _lock:
        new = _rule.values | {v for v in values if v}
        if new != _rule.values:
            _rule = compile_rule(new)


@contextmanager
def secrets_added(values: Iterable[str]) -> Iterator[None]:
    """The set with ``values`` for the duration (tests); the set before is restored after."""
    global _rule
    with _lock:
        before = _rule
    add_secrets(values)
    try:
        yield
    finally:
        with _lock:
            _rule = before


def header_secrets(value: str) -> list[str]:
    """A secret header's value and, after an authentication scheme (``Bearer TOKEN``, ``Basic B64``), the
    credentials alone (a server may echo them without the scheme), and for Basic the decoded user:password and
    password."""
    out = [value]
    mo = _SCHEME.match(value)
    if mo and len(mo.group(1)) >= MIN_DERIVED:
        out.append(mo.group(1))
        if value.lower().startswith("basic"):
            try:
                plain = base64.b64decode(mo.group(1), validate=True).decode()
            except (ValueError, UnicodeDecodeError):
                plain = ""
            out += [p for p in (plain, plain.partition(":")[2]) if len(p) >= MIN_DERIVED]
    return out


def secrets_from_env(names: Iterable[str], environ: Mapping[str, str] | None = None, *,
                     headers: bool = False) -> dict[str, str]:
    """The values of the variables ``names`` that are set, added to the set (``headers``: they are sent as
    headers, see ``header_secrets``)."""
    env = os.environ if environ is None else environ
    found = {k: env[k] for k in names if k in env}
    add_secrets(s for v in found.values() for s in (header_secrets(v) if headers else [v]))
    return found


def redact_range(text: str, start: int, end: int, r: Rule | None = None) -> tuple[str, int, int]:
    """The redacted text of ``text[start:end]``, widened to the whole of a match that crosses start or end (masked);
    and the bounds in ``text`` it covers. ``redact`` for a caller that cuts the text itself."""
    r = _rule if r is None else r
    if r.pattern is None:
        return text[start:end], start, end
    lo = max(0, start - r.reach)
    hi = min(len(text), end + r.reach)
    if not r.may_hold(text if (lo, hi) == (0, len(text)) else text[lo:hi]):
        return text[start:end], start, end
    out: list[str] = []
    pos = start
    for mo in r.pattern.finditer(text, lo):
        if mo.start() >= end:
            break
        if mo.end() <= start:
            continue
        if mo.start() > pos:
            out.append(text[pos:mo.start()])
        elif not out and mo.start() < pos:
            start = mo.start()
        out.append(MASK)
        pos = mo.end()
    if pos < end:
        out.append(text[pos:end])
    return "".join(out), start, max(pos, end)


def redact(text: str, *, cut_start: bool = False, cut_end: bool = False) -> str:
    """``text`` with every form of every secret replaced by ``***``. ``cut_start`` / ``cut_end``: the text was cut
    there from a longer one, so part of a secret may sit at the cut: the ``reach`` characters next to it are left
    out (a whole match among them is masked)."""
    r = _rule
    if r.pattern is None or not text:
        return text
    start = min(len(text), r.reach) if cut_start else 0
    end = max(start, len(text) - r.reach) if cut_end else len(text)
    return redact_range(text, start, end, r)[0]


def redact_json(value: object) -> object:
    """A copy of a JSON-like value with every string (keys too) redacted."""
    if _rule.pattern is None:
        return value
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_json(v) for v in value]
    return value


class StreamRedactor:
    """Redacts a text that comes in pieces: ``feed`` returns what can be written now, ``end`` the rest. What is held
    back: a line not ended yet (written once it ends or passes ``max_line`` characters), and before any cut that is
    not a line end (or with a secret that holds a line break, before every cut) the ``reach`` characters a secret
    could start in."""

    def __init__(self, max_line: int) -> None:
        self.max_line = max_line
        self.pending = ""

    def feed(self, text: str) -> str:
        if not text:
            return ""
        nl = text.rfind("\n")
        self.pending += text
        if nl < 0 and len(self.pending) <= self.max_line:
            return ""
        r = _rule
        cut = self.pending.rfind("\n") + 1
        if len(self.pending) - cut > self.max_line:
            cut = len(self.pending)  # a long line: written in pieces
            hold = r.reach
        else:
            hold = r.reach if r.multiline else 0
        return self._emit(r, cut, hold)

    def end(self) -> str:
        return self._emit(_rule, len(self.pending), 0)

    def _emit(self, r: Rule, cut: int, hold: int) -> str:
        text = self.pending
        if r.pattern is None:
            self.pending = text[cut:]
            return text[:cut]
        out, _, done = redact_range(text, 0, max(0, min(cut, len(text) - hold)), r)
        self.pending = text[done:]
        return out


class RedactingWriter(io.TextIOBase):
    """A text stream (a process's stderr) that masks what it passes on, line by line (``StreamRedactor``); what is
    held back at the end of the process is written then."""

    def __init__(self, raw: TextIO, max_line: int = 1 << 16) -> None:
        super().__init__()
        self.raw = raw
        self.stream = StreamRedactor(max_line)
        atexit.register(self.close)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.raw.fileno()

    def write(self, s: str) -> int:
        out = self.stream.feed(s)
        if out:
            self.raw.write(out)
            self.raw.flush()
        return len(s)

    def flush(self) -> None:
        self.raw.flush()

    def close(self) -> None:
        if not self.closed:
            rest = self.stream.end()
            with contextlib.suppress(OSError, ValueError):
                self.raw.write(rest)
                self.raw.flush()
        super().close()
