"""The text rules of OpenSSH's C code that allowed_signers parsing depends on, re-implemented in Python
(read in openssh-portable 9.2; no code copied): match.c ``match_pattern``/``match_pattern_list``, misc.c
``parse_absolute_time`` with glibc ``strptime``/``mktime``/``timegm``, and the ISC ``b64_pton``. Everything
works on bytes, as the C code does.
"""

from __future__ import annotations

import time

C_SPACE = b" \t\n\v\f\r"  # C isspace() in the C locale
_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def ascii_lower(b: bytes) -> bytes:
    """strncasecmp folds ASCII letters only."""
    return bytes(c + 32 if 65 <= c <= 90 else c for c in b)


def _enc(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


# --------------------------------------------------------------------------- patterns (match.c)


def match_pattern(s: bytes, pattern: bytes) -> bool:
    """``*`` any run, ``?`` any one byte, everything else literal; no escapes or classes."""
    states = {0}
    n = len(pattern)

    def close(st: set[int]) -> set[int]:
        out = set(st)
        for i in sorted(st):
            j = i
            while j < n and pattern[j] == 42:  # '*' may match nothing
                j += 1
                out.add(j)
        return out

    states = close(states)
    for ch in s:
        nxt: set[int] = set()
        for i in states:
            if i < n and pattern[i] == 42:
                nxt.add(i)
            elif i < n and (pattern[i] == 63 or pattern[i] == ch):
                nxt.add(i + 1)
        states = close(nxt)
        if not states:
            return False
    return n in states


def match_pattern_list(s: bytes, patterns: bytes) -> int:
    """1 if a positive subpattern matches and no negated one does, -1 if a negated one matches, else 0."""
    got_positive = 0
    i, n = 0, len(patterns)
    while i < n:
        negated = patterns[i] == 33  # '!'
        if negated:
            i += 1
        end = patterns.find(b",", i)
        end = n if end < 0 else end
        if end - i >= 1023:  # too long for OpenSSH's buffer: the whole list fails
            return 0
        sub, i = patterns[i:end], end + 1 if end < n else end
        if match_pattern(s, sub):
            if negated:
                return -1
            got_positive = 1
    return got_positive


# --------------------------------------------------------------------------- times (misc.c)


def _strptime(buf: bytes, fmt: str) -> list[int] | None:
    """glibc strptime for the %Y %m %d %H %M %S formats parse_absolute_time builds: numbers skip leading
    whitespace and read digits while the value can still grow within range; anything else is literal."""
    limits = {"Y": (0, 9999, 4), "m": (1, 12, 2), "d": (1, 31, 2), "H": (0, 23, 2), "M": (0, 59, 2), "S": (0, 61, 2)}
    out: list[int] = []
    pos, fi = 0, 0
    while fi < len(fmt):
        if fmt[fi] != "%":
            if pos >= len(buf) or buf[pos] != ord(fmt[fi]):
                return None
            pos, fi = pos + 1, fi + 1
            continue
        lo, hi, width = limits[fmt[fi + 1]]
        fi += 2
        while pos < len(buf) and buf[pos] in C_SPACE:
            pos += 1
        if pos >= len(buf) or not 48 <= buf[pos] <= 57:
            return None
        val = 0
        while True:
            val = val * 10 + buf[pos] - 48
            pos += 1
            width -= 1
            if not (width > 0 and val * 10 <= hi and pos < len(buf) and 48 <= buf[pos] <= 57):
                break
        if not lo <= val <= hi:
            return None
        out.append(val)
    return out if pos == len(buf) else None


def _days_from_civil(y: int, m: int, d: int) -> int:
    y -= m <= 2
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + (-3 if m > 2 else 9)) + 2) // 5 + d - 1
    return era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468


def parse_time(text: str | bytes) -> int | None:
    """Seconds since the epoch as OpenSSH's parse_absolute_time gives them, or None where it fails.

    Without a ``Z``/``UTC`` suffix the time is local (the process's ``TZ``), read as standard time."""
    s = _enc(text) if isinstance(text, str) else text
    n = len(s)
    utc = False
    if n > 1 and s[-1:] in (b"Z", b"z"):
        utc, n = True, n - 1
    elif n > 3 and ascii_lower(s[-3:]) == b"utc":
        utc, n = True, n - 3
    if n == 8:
        buf, fmt = b"%s-%s-%s" % (s[:4], s[4:6], s[6:8]), "%Y-%m-%d"
    elif n == 12:
        buf, fmt = b"%s-%s-%sT%s:%s" % (s[:4], s[4:6], s[6:8], s[8:10], s[10:12]), "%Y-%m-%dT%H:%M"
    elif n == 14:
        buf = b"%s-%s-%sT%s:%s:%s" % (s[:4], s[4:6], s[6:8], s[8:10], s[10:12], s[12:14])
        fmt = "%Y-%m-%dT%H:%M:%S"
    else:
        return None
    f = _strptime(buf, fmt)
    if f is None:
        return None
    y, mo, d = f[0], f[1], f[2]
    h, mi, sec = [*f, 0, 0, 0][3:6]
    if utc:
        t = ((_days_from_civil(y, mo, 1) + d - 1) * 24 + h) * 3600 + mi * 60 + sec
    else:
        try:
            t = int(time.mktime((y, mo, d, h, mi, sec, 0, 1, 0)))  # tm_isdst = 0, as memset() leaves it
        except (OverflowError, ValueError):
            return None
    return t if t >= 0 else None


# --------------------------------------------------------------------------- base64 (openbsd-compat/base64.c)


def b64_pton(src: bytes) -> bytes | None:
    """ISC b64_pton: whitespace anywhere is skipped; padding must be right and its spare bits zero."""
    out = bytearray()
    state, acc, i = 0, 0, 0
    while i < len(src) and src[i] != 61:  # '='
        ch = src[i]
        i += 1
        if ch in C_SPACE:
            continue
        v = _B64.find(bytes([ch]))
        if v < 0:
            return None
        acc = (acc << 6) | v
        state = (state + 1) % 4
        if state == 0:
            out += acc.to_bytes(3, "big")
            acc = 0
    if i >= len(src):  # ended without padding: no partial bytes allowed
        return bytes(out) if state == 0 else None
    if state < 2:
        return None
    i += 1
    rest = src[i:]
    if state == 2:  # one byte of data: a second '=' must follow (spaces allowed between)
        rest = rest.lstrip(C_SPACE)
        if not rest.startswith(b"="):
            return None
        rest = rest[1:]
    if rest.strip(C_SPACE):
        return None
    spare = 4 if state == 2 else 2
    if acc & ((1 << spare) - 1):
        return None
    out += (acc >> spare).to_bytes(state - 1, "big")
    return bytes(out)
