"""The queue-bound rule (kit.stats.telemetry.queue_bound): queueing means requests queued while others ran, in most
samples after the first tick, with enough samples to tell. A running batch that never reached the level's concurrency
is a descriptive note, not queueing: in an open loop the level's concurrency is the *cap* on requests in flight, which
an under-loaded server never reaches. Review 2 found the shipped demo-poisson.yaml flagged all 8 cell levels
queue-bound with an empty queue (oea-r1, c=16: 5 samples, running 0..2, queued 0..1; the series below are that
level's, extended to enough samples)."""

from __future__ import annotations

from kit.stats.telemetry import MIN_SAMPLES, batch_note, queue_bound


def test_an_underloaded_level_with_an_empty_queue_is_not_queue_bound() -> None:
    running, queued = [0, 1, 2, 1, 0] * 3, [0, 0, 1, 0, 0] * 3
    bound, why = queue_bound(running, queued, 16)
    assert bound is False and why is None
    assert batch_note(running, 16) == "the running batch never reached 16 (max 2)"


def test_the_review_bundles_five_samples_are_too_short_to_tell() -> None:
    bound, why = queue_bound([0, 1, 2, 1, 0], [0, 0, 1, 0, 0], 16)
    assert bound is None and why is not None and "too short to tell" in why
    # ten samples after a first tick are enough; nine are not
    assert queue_bound([4] * (MIN_SAMPLES + 1), [3] * (MIN_SAMPLES + 1), 4)[0] is True
    assert queue_bound([4] * MIN_SAMPLES, [3] * MIN_SAMPLES, 4)[0] is None


def test_the_first_tick_and_a_lone_prefill_are_not_queueing() -> None:
    # the first tick (all users sending at once) is skipped: one queued sample at the start is nothing
    assert queue_bound([1] + [4] * 10, [30] + [0] * 10, 4)[0] is False
    # queued while nothing runs (a request in its prefill) is not queueing; queued while others run in 6 of 10 is
    assert queue_bound([0] * 11, [1] * 11, 1)[0] is False
    bound, why = queue_bound([4] * 11, [0] * 5 + [2] * 6, 8)
    assert bound is True and why == "requests queued behind a running batch in 60 % of samples"
    assert queue_bound([4] * 11, [0] * 6 + [2] * 5, 8)[0] is False  # exactly half is not most
