"""When each request of a level is sent: the arrival processes and their schedules (pure, standard library only).

``closed``: no schedule; each of the level's users sends its next request as soon as its last one ended.

``poisson`` and ``gamma`` (open loop): request *i* is due at a time fixed before the level starts, whether or not
earlier requests have finished; the schedule is a pure function of (process, rate, burstiness, count, seed), so
``kit verify`` and a reader can rebuild it and hold it against what was sent (each record carries its ``sched_ns``
and the client's own ``late_ns``). The semantics follow vLLM's ``vllm bench serve`` (``get_request`` in
vllm/benchmarks/serve.py): inter-arrival gaps are gamma(shape = burstiness, scale = 1 / (rate x burstiness)) —
burstiness 1 is the exponential (a Poisson process), below 1 burstier, above 1 more regular; the coefficient of
variation of the gaps is 1 / sqrt(burstiness). The first request is due one gap after the start, and the
cumulative times are rescaled so that the last one is due at exactly ``count / rate`` (vLLM's normalisation:
the offered rate is then the requested one for every seed, instead of drifting by ~1/sqrt(count)). Given the
count, the due times of a Poisson process rescaled so are the order statistics of uniform draws on [0, count/rate]:
the gaps are still exponential at the requested rate, which is what the tests check.

Deliberate differences from the peers: kit draws from its own seeded ``random.Random`` (not numpy's global
state), so the schedule is reproducible from the manifest alone; sglang's ``bench_serving`` sends the first request
at once and sleeps a fresh exponential gap after each send (lateness accumulates there), kit sleeps to absolute due
times, so one late send does not shift the ones after it.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass

PROCESSES = ("closed", "poisson", "gamma")
OPEN_LOOP = ("poisson", "gamma")
MAX_SCHEDULE = 1_000_000  # requests in one level's schedule: a bound on what a manifest can ask for
MAX_SPAN_S = 86_400.0     # a schedule's span (count / rate): one day, as load.arrival.duration_s
MIN_BURSTINESS = 0.01     # below it gamma gaps underflow to 0 and the schedule collapses into one burst


@dataclass(frozen=True)
class Arrival:
    """How a level's requests are timed (``load.arrival`` and the level's rate)."""

    process: str = "closed"
    rate: float = 0.0          # requests per second over the level (open loop)
    burstiness: float = 1.0    # gamma shape; 1 = Poisson
    seed: int = 0

    @property
    def open_loop(self) -> bool:
        return self.process in OPEN_LOOP


def check(arrival: Arrival) -> list[str]:
    """What is wrong with these settings (empty when nothing)."""
    problems: list[str] = []
    if arrival.process not in PROCESSES:
        problems.append(f"arrival process {arrival.process!r} is not one of {', '.join(PROCESSES)}")
    if arrival.open_loop and not (math.isfinite(arrival.rate) and arrival.rate > 0):
        problems.append(f"an open-loop level needs a request rate > 0 (got {arrival.rate})")
    if not (math.isfinite(arrival.burstiness) and arrival.burstiness >= MIN_BURSTINESS):
        problems.append(f"burstiness must be >= {MIN_BURSTINESS} (got {arrival.burstiness}): below it the gamma "
                        "gaps underflow to 0 and the level is one burst")
    if arrival.process == "poisson" and arrival.burstiness != 1.0:
        problems.append(f"a poisson process has burstiness 1 (got {arrival.burstiness}); use process gamma")
    return problems


def schedule_s(arrival: Arrival, count: int) -> list[float]:
    """Due times in seconds after the level's start, one per request, ascending; the last at ``count / rate``."""
    if not arrival.open_loop:
        raise ValueError(f"process {arrival.process!r} has no schedule (closed loop)")
    if problems := check(arrival):
        raise ValueError("; ".join(problems))
    if not 1 <= count <= MAX_SCHEDULE:
        raise ValueError(f"a schedule holds 1..{MAX_SCHEDULE} requests (got {count})")
    if count / arrival.rate > MAX_SPAN_S:
        raise ValueError(f"{count} requests at {arrival.rate:g}/s span {count / arrival.rate:.3g} s, over "
                         f"{MAX_SPAN_S:g} s")
    rng = random.Random(arrival.seed)
    shape, scale = arrival.burstiness, 1.0 / (arrival.rate * arrival.burstiness)
    t, out = 0.0, []
    for _ in range(count):
        t += rng.expovariate(arrival.rate) if shape == 1.0 else rng.gammavariate(shape, scale)
        out.append(t)
    if not out[-1] > 0:  # every gap underflowed (a burstiness far below MIN_BURSTINESS): no rate to rescale to
        raise ValueError(f"the schedule collapsed to t = 0 at burstiness {arrival.burstiness}")
    factor = (count / arrival.rate) / out[-1]
    return [x * factor for x in out]


def schedule_ns(arrival: Arrival, count: int) -> list[int]:
    """``schedule_s`` in integer nanoseconds (what the driver sleeps to and what records carry as ``sched_ns``)."""
    return [round(x * 1e9) for x in schedule_s(arrival, count)]


def count_for(arrival: Arrival, duration_s: float) -> int:
    """Requests a time-limited open-loop level schedules: the rate times the duration (at least one)."""
    return max(1, min(MAX_SCHEDULE, math.ceil(arrival.rate * duration_s)))


def split(schedule: list[int], processes: int) -> list[tuple[list[int], list[int]]]:
    """Deal a schedule round-robin over driver processes: per process (global indices, due times). Each process
    then carries a thinned copy of the same process over the whole level, not a block of time of its own."""
    n = max(1, processes)
    return [(list(range(i, len(schedule), n)), schedule[i::n]) for i in range(n)]


def check_sent(arrival: Arrival, count: int, sched_ns: list[int], unsent: int) -> list[str]:
    """Intended against sent: the schedule rebuilt from the level's settings against the ``sched_ns`` of its
    records (every request sent is recorded, ok or not) and the ones counted as not sent. Empty when they agree."""
    want = schedule_ns(arrival, count)
    got = sorted(sched_ns)
    problems: list[str] = []
    if len(got) + unsent != count:
        problems.append(f"{len(got)} requests recorded and {unsent} not sent, but the schedule holds {count}")
    strays = sorted((Counter(got) - Counter(want)).elements())  # due times repeat (gamma gaps under 1 ns)
    if strays:
        problems.append(f"{len(strays)} records carry a sched_ns that is not in the schedule rebuilt from seed "
                        f"{arrival.seed}, or one more often than it (first: {strays[0]} ns): not what was scheduled")
    return problems
