"""The bounds on what a server sends and what a record holds, shared by the load driver that enforces them and by
``kit.stats`` that reads the records (standard library only: the driver process imports it).

Per request, the driver ends a request that goes beyond one with an error naming it: the response head, the part
of an error body that is read, one SSE line, and the events of one response (a multiple of the tokens asked: a
server sends about one per token, plus a few of its own). So a record holds at most ``max_events`` chunk times, and
a ``records.jsonl`` line at most ``max_record_bytes``; a reader refuses to parse a longer one.

And what a server's usage count may be: the one check of ``usage.completion_tokens``, made by the driver as each
response ends (``Record.usage_flag``) and again by ``kit.stats`` on every record it reads.
"""

from __future__ import annotations

MAX_HEAD_BYTES = 64 << 10   # status line and headers (interim 1xx responses included)
MAX_ERROR_BODY = 4 << 10    # what is read of a non-200 response's body (its start is quoted in the error)
MAX_LINE = 256 << 10        # one SSE line, e.g. a `data:` event (a token's event is well under 1 KiB)
EVENTS_PER_TOKEN = 4        # `data:` events allowed per token asked ...
EVENTS_EXTRA = 64           # ... plus these (role, usage, finish and [DONE] events, keep-alives)


def max_events(output_tokens: int) -> int:
    """The most `data:` events one response may carry when ``output_tokens`` were asked."""
    return EVENTS_PER_TOKEN * output_tokens + EVENTS_EXTRA


def max_record_bytes(output_tokens: int) -> int:
    """The longest ``records.jsonl`` line a request asking ``output_tokens`` can make (its chunk times, at most
    20 digits and a separator each, and 64 KiB for the other fields)."""
    return 22 * max_events(output_tokens) + (64 << 10)


MAX_USAGE_TOKENS = 1 << 31
"""A usage count above this (or negative, or not an integer) is implausible: no request produces that many."""


def usage_count(value: object) -> int | None:
    """``value`` as a plausible usage count (an integer in 0..MAX_USAGE_TOKENS, or a JSON number such as 8.0 that
    is one), else None."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_USAGE_TOKENS:
        return value
    return None


UNPARSABLE = "<unparsable usage event>"  # kit.load.sse.parse_usage's answer for a usage event it cannot parse


def usage_problem(usage: object, client_tokens: int, requested: int | None) -> str | None:
    """Why a server's ``usage.completion_tokens`` cannot be true (None: absent, or plausible).

    A content event carries at least one token, so a count below the client's ``client_tokens`` events is
    contradicted; several tokens per event explain a count above the events, but not one above ``requested``
    (the ``max_tokens`` asked, None when unknown), which no server may exceed. Without a usage count, more content
    events than ``requested`` is the same lie told by the stream alone (each would be timed as a token).
    """
    if usage is None:
        if requested is not None and client_tokens > requested:
            return f"{client_tokens} content events above the max_tokens {requested} asked (and no usage count)"
        return None
    if usage == UNPARSABLE:
        return "the usage event is not JSON kit can read (broken, or a number of more digits than Python parses)"
    count = usage_count(usage)
    if count is None:
        text = repr(usage)
        return f"usage.completion_tokens {text[:40]}{'...' if len(text) > 40 else ''} is not an integer in " \
               f"0..{MAX_USAGE_TOKENS}"
    if count < client_tokens:
        return f"usage.completion_tokens {count} below the client's {client_tokens} content events"
    if requested is not None and count > requested:
        return f"usage.completion_tokens {count} above the max_tokens {requested} asked"
    return None
