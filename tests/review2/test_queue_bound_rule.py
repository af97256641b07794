"""Review 2: kit.stats.telemetry.queue_bound calls a level queue-bound when "the running batch never reached"
the level's concurrency, even when nothing was queued. In an open loop the level's concurrency is the *cap* on
requests in flight, which an under-loaded server never reaches: the shipped experiments/demo-poisson.yaml run here
flagged all 8 cell levels "**yes**: the running batch never reached 16 (max 2..4)" with queued median 0, and
report.md's banner then says their latencies "include queueing". The figures below are that bundle's (oea-r1,
c=16: 5 samples, running 0..2, queued 0..1)."""

from __future__ import annotations

import pytest

from kit.stats.telemetry import queue_bound


@pytest.mark.xfail(strict=True, reason="review2: 'never reached c' with an empty queue is not queueing")
def test_an_underloaded_level_with_an_empty_queue_is_not_queue_bound() -> None:
    bound, why = queue_bound([0, 1, 2, 1, 0], [0, 0, 1, 0, 0], 16)
    assert bound is not True, why
