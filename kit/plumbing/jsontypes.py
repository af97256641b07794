"""Names for JSON-shaped data whose keys kit does not own (Docker inspect output, YAML documents,
evidence copied from other tools), and kit's one parse of JSON (``loads``). ``object`` rather than a recursive
union: TypedDicts and lists of them are JSON too, and mypy's invariant dicts would refuse them in a recursive
``Json``."""

from __future__ import annotations

import json
import re
from typing import Any, TypeAlias

Json: TypeAlias = object
JsonObject: TypeAlias = dict[str, object]

MAX_DEPTH = 64  # nesting kit keeps of JSON from outside (a server's answers): deeper is refused, never recursed into


def nesting(value: object, limit: int = MAX_DEPTH) -> int:
    """How deeply ``value`` nests lists and objects, counted without recursion and stopping past ``limit`` (a
    document a server made can be as deep as the parser allowed)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


class TooDeep(json.JSONDecodeError):
    """JSON nested deeper than Python's parser recurses: malformed input like any other (a ValueError), never
    a RecursionError that escapes as an internal error."""


def loads(data: str | bytes | bytearray, *, keep_surrogates: bool = False) -> Any:
    """``json.loads`` of input from outside (every ``json.loads`` of kit's goes through here; ruff bans the
    other): nesting too deep for the parser raises ``TooDeep``, a ``json.JSONDecodeError``, so each caller's
    handling of malformed JSON covers it; a lone surrogate is U+FFFD (``_whole_chars``), unless
    ``keep_surrogates`` (a dataset's prompts: kit.workload refuses such text rather than send other text)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise TooDeep("nested too deeply to parse", "", 0) from None
    if keep_surrogates or not _may_hold_one(data if isinstance(data, str) else bytes(data)):
        return value
    return _whole_chars(value)


def loads_at(text: str, start: int) -> Any:
    """The one JSON value that begins at ``text[start]`` (what follows it is ignored); errors as ``loads``."""
    try:
        value = json.JSONDecoder().raw_decode(text, start)[0]
    except RecursionError:
        raise TooDeep("nested too deeply to parse", "", 0) from None
    return _whole_chars(value) if _may_hold_one(text) else value


# Python's JSON parser accepts a lone surrogate ("\ud800", or its bytes), which no UTF-8 file can hold: a server
# that sent one made every later write of it fail (a review: kit crashed writing server_info.json, run.json, the
# summary). Where the input may hold one (an escape of a surrogate, or bytes of one), strings are mended; a pair
# the parser joined into one character is no surrogate and stays.
_LONE = re.compile("[\ud800-\udfff]")
_MAY_TEXT = re.compile(r"\\u[dD][89a-fA-F]|[\ud800-\udfff]")
_MAY_BYTES = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _may_hold_one(data: str | bytes) -> bool:
    """Whether ``data`` (JSON text or bytes) may parse to a lone surrogate: a ``\\uD800``-``\\uDFFF`` escape, a
    surrogate character, or the bytes ED A0-BF (a surrogate encoded as UTF-8). A pair matches too (harmless)."""
    if isinstance(data, str):  # the plain substring tests first: what almost every line settles at C speed
        return not ("\\u" not in data and data.isascii()) and bool(_MAY_TEXT.search(data))
    return (b"\\u" in data or b"\xed" in data) and bool(_MAY_BYTES.search(data))


def _mend(s: str) -> str:
    return _LONE.sub("\ufffd", s)


def utf8(text: str) -> bytes:
    """``text`` as UTF-8, a lone surrogate as U+FFFD (what ``loads`` reads it back as) rather than an error: one
    that came some other way than ``loads`` (a path or argument decoded with surrogateescape) is written too."""
    try:
        return text.encode()
    except UnicodeEncodeError:
        return _mend(text).encode()


def _whole_chars(value: Any) -> Any:
    """``value`` with every lone surrogate in its strings (keys too) replaced by U+FFFD; iterative (the parser's
    own depth bound holds, but nothing here recurses)."""
    if isinstance(value, str):
        return _mend(value)
    stack: list[Any] = [value] if isinstance(value, dict | list) else []  # containers are mended in place
    while stack:
        node = stack.pop()
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        if isinstance(node, dict):
            node.clear()
        for k, v in items:
            if isinstance(v, str):
                v = _mend(v)
            elif isinstance(v, dict | list):
                stack.append(v)
            node[_mend(k) if isinstance(k, str) else k] = v
    return value
