"""Names for JSON-shaped data whose keys kit does not own (Docker inspect output, YAML documents,
evidence copied from other tools), and kit's one parse of JSON (``loads``). ``object`` rather than a recursive
union: TypedDicts and lists of them are JSON too, and mypy's invariant dicts would refuse them in a recursive
``Json``."""

from __future__ import annotations

import json
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


def loads(data: str | bytes | bytearray) -> Any:
    """``json.loads`` of input from outside (every ``json.loads`` of kit's goes through here; ruff bans the
    other): nesting too deep for the parser raises ``TooDeep``, a ``json.JSONDecodeError``, so each caller's
    handling of malformed JSON covers it."""
    try:
        return json.loads(data)
    except RecursionError:
        raise TooDeep("nested too deeply to parse", "", 0) from None


def loads_at(text: str, start: int) -> Any:
    """The one JSON value that begins at ``text[start]`` (what follows it is ignored); errors as ``loads``."""
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except RecursionError:
        raise TooDeep("nested too deeply to parse", "", 0) from None
