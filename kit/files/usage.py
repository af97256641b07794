"""What a server's usage count may be: the one check of ``usage.completion_tokens``, made by the load driver as
each response ends (``Record.usage_flag``) and again by ``kit.stats`` on every record it reads (standard library
only: the driver process imports it)."""

from __future__ import annotations

MAX_USAGE_TOKENS = 1 << 31
"""A usage count above this (or negative, or not an integer) is implausible: no request produces that many."""


def usage_count(value: object) -> int | None:
    """``value`` as a plausible usage count (an integer in 0..MAX_USAGE_TOKENS), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_USAGE_TOKENS:
        return value
    return None


def usage_problem(usage: object, client_tokens: int, requested: int | None) -> str | None:
    """Why a server's ``usage.completion_tokens`` cannot be true (None: absent, or plausible).

    A content event carries at least one token, so a count below the client's ``client_tokens`` events is
    contradicted; several tokens per event explain a count above the events, but not one above ``requested``
    (the ``max_tokens`` asked, None when unknown), which no server may exceed.
    """
    if usage is None:
        return None
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
