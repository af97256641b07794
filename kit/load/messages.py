"""The JSON lines a driver process prints on stdout, and the stats that end up in ``client.json``.

Pure typing (standard library only): both sides of the process split import it. A driver prints one
JSON object per line with an ``event`` key:

``warm``      after the warm-up of a level (``WarmEvent``)
``progress``  every ``progress_interval_s`` while a phase runs (``ProgressEvent``)
``start``     when the level starts (after ``go`` when the parent asked to wait for it)
``done``      at the end of the level, with the process's self-monitoring (``DoneEvent``)

The parent writes commands on the driver's stdin, one JSON object per line (``LevelCommand``), or
``go`` once every process of the level is warm. End of input tells the driver to exit.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict


class LagThird(TypedDict):
    p50_ms: float
    p99_ms: float


class LagStats(TypedDict):
    """The 10 ms scheduling-lag probe over one level (``first_third``/``last_third`` need 15 samples)."""

    samples: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    first_third: NotRequired[LagThird]
    last_third: NotRequired[LagThird]


class GapStats(TypedDict):
    """Inter-chunk gaps of one level; the ms fields are None when there were no gaps."""

    gaps: int
    median_ms: float | None
    p99_ms: float | None
    near_zero_share: float | None
    near_zero_threshold_ms: NotRequired[float]


class FirstReadStats(TypedDict):
    """Per ok request, the client's own delay on its first content chunk: when the process read the bytes
    minus when the kernel queued them on the socket (``SO_TIMESTAMPNS``); ``requests`` 0 when unmeasured."""

    requests: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class DelayStats(TypedDict):
    """A per-request delay of the client's own over one level (``lateness``: sent minus due; ``queue``: due
    minus scheduled, waiting for a free user under max_concurrency); ``requests`` 0 when none was sent."""

    requests: int
    p50_ms: float
    p99_ms: float
    max_ms: float


class Window(TypedDict):
    """The steady-state window of one process (perf ns, the clock of the records' ``t_start_ns``)."""

    start_ns: int
    end_ns: int
    ramp_ns: int
    stagger_ns: int


class WarmupInfo(TypedDict):
    requests: int
    ok: int
    errors: int
    wall_s: float
    first_error: str | None
    mean_e2e_ns: NotRequired[int]


class WorkerStats(TypedDict):
    """One driver process's self-monitoring over one level: an entry of ``client.json``'s ``workers``."""

    worker: int
    pid: int
    users: int
    requests: int
    ok: int
    errors: int
    first_error: str | None
    out_tokens: int
    usage_completion_tokens: int
    wall_s: float
    start_wall: float
    end_wall: float
    cpu_s: float
    cpu_share: float
    cpu_window_s: float
    cpu_window_share_max: float | None
    cpu_window_share_p50: float | None
    cpu_us_per_token: float | None
    tokens_per_s: float
    lag: LagStats
    itl: GapStats
    first_read: NotRequired[FirstReadStats]
    rlimit_nofile: NotRequired[int]
    warmup: NotRequired[WarmupInfo]
    lateness: NotRequired[DelayStats]      # sent minus due, per sent request (kit.load.arrivals)
    queue: NotRequired[DelayStats]         # open loop: waiting, with every user busy (the cap), for one to free
    unsent: NotRequired[int]               # open loop, time-limited: due but not sent by the deadline
    scheduled: NotRequired[int]            # open loop: requests in this process's schedule
    offered_rate: NotRequired[float | None]  # open loop: the schedule's rate (requests/s) in this process
    sent_rate: NotRequired[float | None]   # requests/s between this process's first and last send
    window: NotRequired[Window]            # load.window steady: the requests the statistics keep
    t0_ns: NotRequired[int]                # the level's start on this process's clock (perf ns = CLOCK_MONOTONIC)
    start_skew_ns: NotRequired[int | None]  # how long after the common start this process was ready (None: none)


class WarmEvent(WarmupInfo):
    event: Literal["warm"]
    worker: int


class ProgressEvent(TypedDict):
    event: Literal["progress"]
    worker: int
    phase: str                  # "warmup" | "level"
    done: int
    errors: int
    out_tokens: int
    elapsed_s: float


class DoneEvent(TypedDict):
    event: Literal["done"]
    worker: int
    stats: WorkerStats


class LevelCommand(TypedDict):
    """Parent -> driver: run one level with this ``DriverConfig`` (as a dict)."""

    cmd: Literal["level"]
    config: dict[str, object]
