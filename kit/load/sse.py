"""Byte-level reading of OpenAI-style SSE events, cheap enough to run on every token.

Content chunks are recognised on the raw bytes, without ``json.loads``: a chunk carries content when a
``"content"`` / ``"reasoning_content"`` key (chat) or a ``"text"`` key (completions) holds a non-empty
string. Inside a JSON string every quote is escaped, so the unescaped byte pattern ``content":"`` can only
be a key. Only the rare chunks (usage, errors) are parsed as JSON.

The bounds on what a server may send per request are ``kit.files.bounds``'s.
"""

from __future__ import annotations

from kit.files import bounds
from kit.plumbing.jsontypes import loads
from kit.plumbing.redact import redact

CHAT_KEY = b'content":'
TEXT_KEY = b'"text":'
_USAGE = (b'"usage":{', b'"usage": {')
DONE = b"[DONE]"
FINISH = b'"finish_reason":"'  # a non-null finish_reason (compact JSON, the form every server sends per token)
_FINISH_SPACED = b'"finish_reason": "'


def content_key(endpoint: str) -> bytes:
    return CHAT_KEY if endpoint == "chat" else TEXT_KEY


def has_content(payload: bytes, key: bytes) -> bool:
    """True when some value under ``key`` is a non-empty JSON string."""
    n = len(key)
    i = payload.find(key)
    while i >= 0:
        j = i + n
        if payload.startswith(b" ", j):  # tolerate `"key": "value"` spacing
            j = len(payload) - len(payload[j:].lstrip(b" "))
        if payload.startswith(b'"', j) and not payload.startswith(b'""', j):
            return True
        i = payload.find(key, j)
    return False


def has_finish(payload: bytes) -> bool:
    """True when the event carries a non-null ``finish_reason`` (the last event of a choice)."""
    return FINISH in payload or _FINISH_SPACED in payload


def has_usage(payload: bytes) -> bool:
    return _USAGE[0] in payload or _USAGE[1] in payload


def parse_usage(payload: bytes) -> tuple[object, object]:
    """(completion_tokens, prompt_tokens) from a chunk that carries a usage object, as the server sent them (None
    when absent, ``bounds.UNPARSABLE`` when the event cannot be parsed: flagged, not read as no usage, e.g. a count
    of 100,000 digits, past Python's int-parse limit); whether they are plausible is ``kit.files.bounds``'s to say."""
    try:
        usage = loads(payload).get("usage") or {}
    except ValueError:  # TooDeep, and a number of too many digits, are ValueErrors
        return bounds.UNPARSABLE, bounds.UNPARSABLE
    except AttributeError:  # not an object
        return None, None
    if not isinstance(usage, dict):
        return None, None
    return usage.get("completion_tokens"), usage.get("prompt_tokens")


def error_message(payload: bytes) -> str | None:
    """A short message when an event reports an error mid-stream (sglang/vLLM style), else None."""
    if b'"error"' not in payload and b'"object":"error"' not in payload:
        return None
    try:
        obj = loads(payload)
    except ValueError:
        return "unparsable error event"
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if isinstance(err, dict):
        return _short(err.get("message") or err)
    if err:
        return _short(err)
    if obj.get("object") == "error":
        return _short(obj.get("message") or "error event")
    return None


def _short(value: object) -> str:
    """An error's text for a record: secrets masked (kit.plumbing.redact), then cut."""
    return redact(str(value))[:200]
