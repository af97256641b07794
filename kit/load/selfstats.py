"""Pure summaries of a driver's self-monitoring: scheduling lag and inter-chunk gaps (standard library only)."""

from __future__ import annotations

import bisect
import operator
from array import array

from kit.load.messages import DelayStats, FirstReadStats, GapStats, LagStats

NEAR_ZERO_GAP_NS = 100_000  # two chunks stamped < 0.1 ms apart were (almost surely) read together


def _pct(sorted_vals: list[int], q: float) -> int:
    if not sorted_vals:
        return 0
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def lag_stats(lag_ns: array[int]) -> LagStats:
    vals = list(lag_ns)
    n = len(vals)
    s = sorted(vals)
    out: LagStats = {"samples": n, "p50_ms": _pct(s, 0.5) / 1e6, "p99_ms": _pct(s, 0.99) / 1e6,
                     "max_ms": (s[-1] / 1e6 if s else 0.0)}
    third = n // 3
    if third >= 5:
        first, last = sorted(vals[:third]), sorted(vals[-third:])
        out["first_third"] = {"p50_ms": _pct(first, 0.5) / 1e6, "p99_ms": _pct(first, 0.99) / 1e6}
        out["last_third"] = {"p50_ms": _pct(last, 0.5) / 1e6, "p99_ms": _pct(last, 0.99) / 1e6}
    return out


def first_read_stats(lag_ns: array[int]) -> FirstReadStats:
    """The client's own delay on each request's first content chunk (kernel receive -> read by the process)."""
    s = sorted(lag_ns)
    return {"requests": len(s), "p50_ms": _pct(s, 0.5) / 1e6, "p99_ms": _pct(s, 0.99) / 1e6,
            "max_ms": (s[-1] / 1e6 if s else 0.0)}


def inter_chunk_gaps(offsets: array[int], lengths: array[int]) -> array[int]:
    """Gaps between consecutive chunks of the same request, from concatenated per-request offsets."""
    gaps = array("q")
    start = 0
    for n in lengths:
        if n > 1:
            seg = offsets[start:start + n]
            gaps.extend(map(operator.sub, seg[1:], seg[:-1]))
        start += n
    return gaps


def gap_stats(gaps: array[int]) -> GapStats:
    n = len(gaps)
    if n == 0:
        return {"gaps": 0, "median_ms": None, "p99_ms": None, "near_zero_share": None}
    s = sorted(gaps)
    near = bisect.bisect_left(s, NEAR_ZERO_GAP_NS)
    return {"gaps": n, "median_ms": _pct(s, 0.5) / 1e6, "p99_ms": _pct(s, 0.99) / 1e6,
            "near_zero_share": near / n, "near_zero_threshold_ms": NEAR_ZERO_GAP_NS / 1e6}


def delay_stats(delays_ns: array[int]) -> DelayStats:
    """A per-request delay of the client's (lateness, waiting for a free user): how many, p50/p99/max in ms."""
    s = sorted(delays_ns)
    return {"requests": len(s), "p50_ms": _pct(s, 0.5) / 1e6, "p99_ms": _pct(s, 0.99) / 1e6,
            "max_ms": (s[-1] / 1e6 if s else 0.0)}
