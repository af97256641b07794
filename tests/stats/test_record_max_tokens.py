"""The tokens a request asked for, per record: a dataset workload's records carry their own ``max_tokens`` (written
by the load generator), and the short-response and usage guardrails judge each request against it; records without
one (every bundle before datasets) are judged against ``load.output_tokens`` as before."""

from __future__ import annotations

from typing import Any

from kit.stats import reduce_records

MS = 1_000_000


def _rec(tokens: int, usage: int, max_tokens: int | None) -> dict[str, Any]:
    chunks = [20 * MS + i * 5 * MS for i in range(tokens)]
    rec: dict[str, Any] = {"status": 200, "error": None, "wall_start": 1000.0, "ttft_ns": chunks[0],
                           "chunk_ns": chunks, "e2e_ns": chunks[-1], "usage_completion_tokens": usage,
                           "client_tokens": tokens}
    if max_tokens is not None:
        rec["max_tokens"] = max_tokens
    return rec


def test_each_request_is_judged_against_the_tokens_it_asked_for() -> None:
    """load.output_tokens 64; dataset requests asked 128 (got 128: neither short nor flagged), 32 (got 32: not
    short, though below 64) and 200 (got 150: short). Counted by hand: 1 short, 0 flagged, tokens 128 + 32 + 150."""
    lr = reduce_records([_rec(128, 128, 128), _rec(32, 32, 32), _rec(150, 150, 200)], requested=64)
    assert lr.usage_flagged == 0 and lr.short(64) == 1 and lr.output_tokens == 128 + 32 + 150


def test_records_without_max_tokens_use_the_manifests_as_before() -> None:
    """No max_tokens in the records: 128 tokens against 64 asked is an implausible usage count (flagged, the
    client's count used), 32 is short; as summary schemas up to 5 always judged them."""
    lr = reduce_records([_rec(128, 128, None), _rec(32, 32, None), _rec(64, 64, None)], requested=64)
    assert lr.usage_flagged == 1 and lr.short(64) == 1


def test_an_implausible_max_tokens_falls_back_to_the_manifests() -> None:
    for bad in (0, -5, "128", 2**40, True):
        lr = reduce_records([_rec(32, 32, None) | {"max_tokens": bad}], requested=64)
        assert lr.short(64) == 1, bad
