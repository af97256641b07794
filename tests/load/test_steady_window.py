"""The steady window (``load.arrival.window: steady``, kit.files.records.steady_window) selects on send time only.

It once kept a request only when it *ended* before the last send: of the requests sent late in the window only the
fast ones were kept, a selection on the outcome that biased the window's latency low, the slower arm's more (a true
x1.30 read as x1.20). Independent reference: the same records selected on send time with the standard library
(every request sent inside [start, end]), and the ratio that the arms were built with.
"""

from __future__ import annotations

import random
import statistics

import pytest

from kit.files.records import steady_window

START_NS, END_NS = 1_000_000_000, 4_000_000_000  # the window: one warm-up E2E after t0 .. the last send


def _records(scale: float, n: int = 20_000, seed: int = 1) -> list[dict[str, object]]:
    """Open-loop sends spread evenly over the level [0, END_NS]; E2E lognormal (median 1 s x scale)."""
    rng = random.Random(seed)  # the same sends and the same noise for both arms (common random numbers)
    out: list[dict[str, object]] = []
    for _ in range(n):
        start = rng.randrange(0, END_NS)
        e2e = round(scale * 1e9 * rng.lognormvariate(0.0, 0.5))
        out.append({"worker": 0, "t_start_ns": start, "e2e_ns": e2e})
    return out


def _means(scale: float) -> tuple[float, float, float]:
    recs = _records(scale)
    keep = steady_window([{"worker": 0, "window": {"start_ns": START_NS, "end_ns": END_NS}}])
    kept = [int(r["e2e_ns"]) for r in recs if keep(r)]  # type: ignore[call-overload]
    sent_in = [int(r["e2e_ns"]) for r in recs  # type: ignore[call-overload]
               if START_NS <= int(r["t_start_ns"]) <= END_NS]  # type: ignore[call-overload]
    return statistics.fmean(kept), statistics.fmean(sent_in), len(kept) / len(sent_in)


def test_window_keeps_the_mean_of_requests_sent_in_it() -> None:
    kept, sent_in, _ = _means(1.0)
    assert kept == pytest.approx(sent_in, rel=0.05), (kept / 1e9, sent_in / 1e9)


def test_window_keeps_the_ab_ratio() -> None:
    a_kept, a_all, a_share = _means(1.0)
    b_kept, b_all, b_share = _means(1.3)  # arm B exactly 30 % slower on every request
    assert b_all / a_all == pytest.approx(1.3, rel=0.01)  # the unbiased selection sees the true ratio
    assert b_kept / a_kept == pytest.approx(1.3, rel=0.03), (b_kept / a_kept, a_share, b_share)


def test_the_kept_set_is_the_requests_sent_in_the_window_whatever_their_outcome() -> None:
    """Slow, failed and timed-out requests sent inside the window are kept (they are errors of the window); a
    request sent a nanosecond outside it is not, however fast; another worker's window does not apply."""
    keep = steady_window([{"worker": 0, "window": {"start_ns": START_NS, "end_ns": END_NS}}, {"worker": 1}])
    assert keep({"worker": 0, "t_start_ns": END_NS, "e2e_ns": 10**12, "error": "timeout after 600 s"})
    assert keep({"worker": 0, "t_start_ns": START_NS, "e2e_ns": 0, "status": 0})
    assert not keep({"worker": 0, "t_start_ns": START_NS - 1, "e2e_ns": 1})
    assert not keep({"worker": 0, "t_start_ns": END_NS + 1, "e2e_ns": 1})
    assert not keep({"worker": 0, "e2e_ns": 1})  # no send time: cannot be placed in the window
    assert keep({"worker": 1, "t_start_ns": 0, "e2e_ns": 1})  # window: all
    a_kept, a_all, a_share = _means(1.0)
    _b_kept, _b_all, b_share = _means(1.3)
    assert a_share == b_share == 1.0 and a_kept == a_all
