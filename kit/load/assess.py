"""Decide from a driver's self-monitoring whether the client, not the server, may have set the numbers.

Pure functions over the ``stats`` dicts the driver prints at the end of a level (see ``kit.load.driver``).
A level is flagged ``client_bound`` (no clean verdict) when any process:

- used ``>= CPU_SHARE_LIMIT`` of one core over the level (a gevent process cannot use more than one);
- had a lag that grew over the level (last third's p99 well above the first third's) *and* a lag p99 over the
  whole level above ``LAG_P99_LIMIT_MS``. A third of a short level holds a few hundred probe samples, so its
  "p99" is its largest one or two: one hiccup of the machine made it "grow" (9 of 110 level-cells of the demo
  on a busy 2-core machine, 7 of them with the whole level's p99 under 5 ms, the client at 2-4 % of a core,
  benchmarks/results/demo-2026-12-03/client-bound-lag.txt). A lag whose p99 stays within the limit leaves
  every timestamp within the 5 ms kit tolerates everywhere else, grown or not: a timing warning then;
- read chunks in bursts: median inter-chunk gap below ``COLLAPSED_ITL_MS`` over many gaps, or more than
  ``NEAR_ZERO_SHARE_LIMIT`` of all gaps near zero (several events taken from the socket in one read means
  they waited in the kernel for the client).

A scheduling-lag p99 above ``LAG_P99_LIMIT_MS`` with a stable lag and a client below its CPU limit (typical
when the server shares a small machine with the client) is a *timing warning* instead: every timestamp in
that process can be that late, so tails (p99) are off by up to that much, while means over many requests
are not biased by it. The report shows these warnings beside the figures.

Separately, ``assess_ttft`` decides ``ttft_client_bound``: the client's own share of the level's TTFT p99
may exceed ``TTFT_CLIENT_SHARE_LIMIT_MS``, so the TTFT verdict at that level is withheld (the other
metrics keep theirs). The evidence, per process: the first-chunk read lag p99 (kernel receive timestamp ->
read by the process, per request: it sees a wave of first chunks queued behind each other, which the 10 ms
probe misses), the lag probe's p99 (every timestamp late by that much), and a CPU window at
``>= CPU_WINDOW_PEAK_LIMIT`` of one core (the loop saturated for half a second: reads queued in it even when
the level's average looks fine). The limit is 5 ms, as for the lag probe: below it the client's share is
within the run-to-run spread of a real server's TTFT p99 (tens of ms), and above it ``benchmarks/loadgen.py``
measured TTFT p99 errors of the same size (a client that adds more than 5 ms to a tail can turn a verdict).

Open loop (``kit.load.arrivals``), a process is also flagged when its requests went out late: the p99 of its
lateness (sent minus due, per request) above ``LATE_P99_LIMIT_MS``, or above ``LATE_GAP_SHARE`` of the level's
mean gap when that is smaller (1 ms at 100 requests/s): the arrival process the server saw is then not the one
asked for; likewise a process that was ready more than that limit after the level's common start. Waiting for
the cap is not lateness: ``queue`` counts only from when a request fell due with every user busy until a finished
request freed one (event-loop delay after that is lateness). Any queueing is a timing warning, not a withheld
verdict: the cap is pre-registered, the backlog that fills it is the server's (the slower arm fills it first),
and the client's timestamps stay right; a rate achieved below ``DELIVERED_SHARE`` of the offered one is one too.
In a closed loop the lateness (a user free -> its next request sent) is recorded but not judged.

The thresholds come from ``benchmarks/loadgen.py`` against a server with known timing: the lag probe's p99
tracked the p99 of the per-gap ITL error closely at every level measured (1 ms vs 1 ms, 3 vs 3, 21 vs 21,
49 vs 45, 141 vs 128), so a lag p99 above 5 ms means ITL tails (and TTFTs) are off by that much. The
shared anchors agree on the rest: CPU >= 85-90 % is where timing degrades, and when a client saturates
its median ITL collapses to ~0 while throughput still looks fine.
"""

from __future__ import annotations

from kit.load.messages import GapStats, LagStats, WorkerStats

CPU_SHARE_LIMIT = 0.85
LAG_P99_LIMIT_MS = 5.0
LAG_GROWTH_FACTOR = 2.0
LAG_GROWTH_MIN_MS = 3.0
COLLAPSED_ITL_MS = 0.05
NEAR_ZERO_SHARE_LIMIT = 0.10
MIN_GAPS = 200
TTFT_CLIENT_SHARE_LIMIT_MS = 5.0
CPU_WINDOW_PEAK_LIMIT = 0.95
LATE_P99_LIMIT_MS = 5.0
LATE_GAP_SHARE = 0.1
DELIVERED_SHARE = 0.98


def thresholds() -> dict[str, float]:
    return {"cpu_share": CPU_SHARE_LIMIT, "lag_p99_ms": LAG_P99_LIMIT_MS,
            "lag_growth_factor": LAG_GROWTH_FACTOR, "lag_growth_min_ms": LAG_GROWTH_MIN_MS,
            "collapsed_median_itl_ms": COLLAPSED_ITL_MS, "near_zero_gap_share": NEAR_ZERO_SHARE_LIMIT,
            "min_gaps": MIN_GAPS, "ttft_client_share_ms": TTFT_CLIENT_SHARE_LIMIT_MS,
            "cpu_window_peak": CPU_WINDOW_PEAK_LIMIT, "late_p99_ms": LATE_P99_LIMIT_MS,
            "late_gap_share": LATE_GAP_SHARE,
            "delivered_share": DELIVERED_SHARE}


def ttft_client_share_ms(workers: list[WorkerStats]) -> float | None:
    """The client's own share of the level's TTFT p99, as far as it can see it (ms; None when unmeasured):
    the larger of the first-chunk read lag p99 and the lag probe's p99, over the processes."""
    vals: list[float] = []
    for stats in workers:
        first, lag = stats.get("first_read"), stats.get("lag")
        if first and first.get("requests"):
            vals.append(float(first.get("p99_ms") or 0.0))
        if lag and lag.get("samples"):
            vals.append(float(lag.get("p99_ms") or 0.0))
    return max(vals) if vals else None  # unrounded: the larger of the two exactly


def assess_ttft(workers: list[WorkerStats]) -> list[str]:
    """Reasons (possibly none) to withhold the TTFT verdict: the client's share of TTFT p99 may be > 5 ms."""
    lim = TTFT_CLIENT_SHARE_LIMIT_MS
    reasons: list[str] = []
    for stats in workers:
        who = f"process {stats.get('worker', '?')}"
        first, lag = stats.get("first_read"), stats.get("lag")
        if first and first.get("requests") and (p99 := first.get("p99_ms") or 0.0) > lim:
            reasons.append(f"{who}: first-chunk read lag p99 {p99:.1f} ms over {first['requests']} requests "
                           f"(limit {lim:g} ms): TTFT p99 may read up to {p99:.0f} ms high")
        if lag and (p99 := lag.get("p99_ms") or 0.0) > lim:
            reasons.append(f"{who}: scheduling lag p99 {p99:.1f} ms (limit {lim:g} ms): TTFT p99 may read up "
                           f"to {p99:.0f} ms high")
        peak = stats.get("cpu_window_share_max") or 0.0
        if peak >= CPU_WINDOW_PEAK_LIMIT:
            reasons.append(f"{who}: CPU peaked at {peak:.0%} of one core in a {stats.get('cpu_window_s', 0.5):g} s "
                           f"window (limit {CPU_WINDOW_PEAK_LIMIT:.0%}): reads queued behind each other then")
    return reasons


def late_limit_ms(level_rate: float) -> float:
    """The lateness p99 an open-loop level tolerates: 5 ms, or a tenth of its mean gap when that is smaller (a
    send jittered by a tenth of the gap visibly bends the gap distribution: at 100 requests/s, 1 ms)."""
    return min(LATE_P99_LIMIT_MS, LATE_GAP_SHARE * 1000.0 / level_rate) if level_rate > 0 else LATE_P99_LIMIT_MS


def level_rate(workers: list[WorkerStats]) -> float:
    """The open-loop level's offered rate (requests/s), summed over its processes; 0 in a closed loop."""
    return sum(float(w.get("offered_rate") or 0.0) for w in workers)


def assess_worker(stats: WorkerStats, level_rate: float = 0.0) -> list[str]:
    """Reasons (possibly none) why this process's measurements cannot be trusted."""
    who = f"process {stats.get('worker', '?')}"
    reasons: list[str] = []
    cpu = stats.get("cpu_share") or 0.0
    if cpu >= CPU_SHARE_LIMIT:
        reasons.append(f"{who}: CPU {cpu:.0%} of one core over the level (limit {CPU_SHARE_LIMIT:.0%})")
    lag, itl, late = stats.get("lag"), stats.get("itl"), stats.get("lateness")
    limit = late_limit_ms(level_rate)
    if late and "scheduled" in stats and (p99 := late.get("p99_ms") or 0.0) > limit:
        reasons.append(f"{who}: requests sent late, lateness p99 {p99:.2f} ms over {late['requests']} requests "
                       f"(limit {limit:.3g} ms at {level_rate:.4g} requests/s): the server did not see the arrival "
                       "process asked for")
    skew_ms = (stats.get("start_skew_ns") or 0) / 1e6
    if "scheduled" in stats and skew_ms > limit:
        reasons.append(f"{who}: ready {skew_ms:.2f} ms after the level's common start (limit {limit:.3g} ms): its "
                       "first requests went out late, the processes did not start their schedule together")
    reasons += _lag_reasons(who, lag) if lag else []
    reasons += _gap_reasons(who, itl) if itl else []
    return reasons


def timing_warnings_worker(stats: WorkerStats) -> list[str]:
    """Soft findings: timestamps in this process may be late by up to the lag p99 (tails affected)."""
    out: list[str] = []
    who = f"process {stats.get('worker', '?')}"
    offered, sent = stats.get("offered_rate"), stats.get("sent_rate")
    if offered and sent is not None and sent < DELIVERED_SHARE * offered:
        out.append(f"{who}: {sent:.3g} requests/s sent of {offered:.3g} offered: "
                   "max_concurrency held requests back (see queue), the offered load was not delivered")
    queue = stats.get("queue")
    if queue and (worst := queue.get("max_ms") or 0.0) > 0:
        out.append(f"{who}: requests waited for the cap (every user busy), queue p99 {queue.get('p99_ms') or 0:.1f} "
                   f"ms, max {worst:.1f} ms: the server saw the arrivals thinned by its own backlog; latencies "
                   "exclude the wait (as vLLM's and sglang's), so compare arms at this level with that in mind")
    skew_ms = (stats.get("start_skew_ns") or 0) / 1e6
    if "scheduled" not in stats and skew_ms > LATE_P99_LIMIT_MS:
        out.append(f"{who}: ready {skew_ms:.1f} ms after the level's common start: its users started late")
    lag = stats.get("lag")
    p99 = (lag.get("p99_ms") if lag else None) or 0.0
    if p99 <= LAG_P99_LIMIT_MS:
        if lag and lag_grew(lag):
            out.append(f"{who}: scheduling lag rose late in the level (third's p99 {lag['first_third']['p99_ms']:.1f} "
                       f"-> {lag['last_third']['p99_ms']:.1f} ms) but its p99 over the level stayed at {p99:.1f} ms "
                       f"(limit {LAG_P99_LIMIT_MS:g} ms): a hiccup of the machine, timestamps within the limit")
        return out
    return [*out, f"process {stats.get('worker', '?')}: scheduling lag p99 {p99:.1f} ms (above "
            f"{LAG_P99_LIMIT_MS:g} ms): p99 latencies may read up to {p99:.0f} ms high; means are unaffected"]


def timing_warnings(workers: list[WorkerStats]) -> list[str]:
    out: list[str] = []
    for stats in workers:
        out += timing_warnings_worker(stats)
    return out


def _lag_reasons(who: str, lag: LagStats) -> list[str]:
    if not (lag_grew(lag) and (p99 := lag.get("p99_ms") or 0.0) > LAG_P99_LIMIT_MS):
        return []
    a, b = lag["first_third"]["p99_ms"], lag["last_third"]["p99_ms"]
    return [f"{who}: scheduling lag grew over the level (p99 {a:.1f} ms in the first third, {b:.1f} ms in the "
            f"last, {p99:.1f} ms over the level: limit {LAG_P99_LIMIT_MS:g} ms)"]


def lag_grew(lag: LagStats) -> bool:
    """The last third's lag p99 well above the first third's (by ``LAG_GROWTH_FACTOR`` and
    ``LAG_GROWTH_MIN_MS``)."""
    first, last = lag.get("first_third"), lag.get("last_third")
    if not first or not last:
        return False
    a, b = first["p99_ms"], last["p99_ms"]
    return b > LAG_GROWTH_FACTOR * a and b - a > LAG_GROWTH_MIN_MS


def _gap_reasons(who: str, itl: GapStats) -> list[str]:
    n = itl.get("gaps") or 0
    if n < MIN_GAPS:
        return []
    out: list[str] = []
    median = itl.get("median_ms")
    if median is not None and median < COLLAPSED_ITL_MS:
        out.append(f"{who}: median inter-chunk gap {median:.3f} ms over {n} gaps: chunks were read in "
                   "bursts, the client could not keep up (or the server sends tokens in bursts)")
    share = itl.get("near_zero_share") or 0.0
    if share > NEAR_ZERO_SHARE_LIMIT:
        out.append(f"{who}: {share:.0%} of {n} inter-chunk gaps are near zero (limit "
                   f"{NEAR_ZERO_SHARE_LIMIT:.0%}): chunks waited in the socket for the client")
    return out


def assess(workers: list[WorkerStats]) -> list[str]:
    reasons: list[str] = []
    rate = level_rate(workers)
    for stats in workers:
        reasons += assess_worker(stats, rate)
    return reasons
