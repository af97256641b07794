"""``cells/<id>/level-<c>/client.json``: the load client's self-monitoring over one level.

Written by ``kit.load`` when a level ends: per driver process its CPU time and share of one core, a 10 ms
scheduling-lag probe, inter-chunk gap statistics and tokens/s; the verdict ``client_bound`` with its reasons
(``kit.load.assess``: a level where the client could not keep up must never look clean) and timing warnings.
``kit.stats`` reads ``client_bound``, ``client_bound_reasons`` and ``timing_warnings``.

``ttft_client_bound`` (with ``ttft_client_bound_reasons`` and ``ttft_client_share_p99_ms``): the client's own
share of this level's TTFT p99 may exceed 5 ms (first-chunk read lag, lag probe, CPU window peak; see
``kit.load.assess.assess_ttft``), so no TTFT verdict at this level; true whenever ``client_bound`` is.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Open(BaseModel):
    """Fields named here are checked; others (added by newer drivers) are kept."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


class LagStats(_Open):
    """The scheduling-lag probe of one driver process (ms); thirds only with enough samples."""

    samples: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


class GapStats(_Open):
    """Inter-chunk gaps seen by one driver process."""

    gaps: int
    median_ms: float | None = None
    p99_ms: float | None = None
    near_zero_share: float | None = None


class FirstReadStats(_Open):
    """Per ok request, kernel receive -> read by the process of its first content chunk (ms)."""

    requests: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


class DelayStats(_Open):
    """A per-request delay of the client's own (ms): ``lateness`` (sent minus due) or ``queue`` (open loop: from when
    it fell due with every user busy under the level's cap until the release that freed one)."""

    requests: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    max_ms: float | None = None


class Window(_Open):
    """``load.arrival.window: steady``: the statistics keep a request sent at or after ``start_ns`` and at or before
    ``end_ns``, whatever its outcome (perf ns, the clock of the records' ``t_start_ns`` in this process;
    ``kit.files.records``)."""

    start_ns: int
    end_ns: int
    ramp_ns: int | None = None
    """The warm-up's mean E2E: the ramp (open loop) or the span the users' first requests were spread over."""
    stagger_ns: int | None = None


class WorkerStats(_Open):
    """One driver process over the level (what its ``done`` event reported; partial if it died)."""

    worker: int | None = None
    pid: int | None = None
    users: int | None = None
    requests: int | None = None
    ok: int | None = None
    errors: int | None = None
    out_tokens: int | None = None
    wall_s: float | None = None
    cpu_s: float | None = None
    cpu_share: float | None = None
    cpu_us_per_token: float | None = None
    tokens_per_s: float | None = None
    lag: LagStats | None = None
    itl: GapStats | None = None
    cpu_window_share_max: float | None = None
    first_read: FirstReadStats | None = None
    lateness: DelayStats | None = None
    """Sent minus due, per sent request (kit.load.arrivals); judged in an open loop only (kit.load.assess)."""
    queue: DelayStats | None = None
    unsent: int | None = None
    """Open loop, time-limited: requests due but not sent by the level's end."""
    scheduled: int | None = None
    """Open loop: the requests in this process's share of the schedule (absent in a closed loop)."""
    offered_rate: float | None = None
    sent_rate: float | None = None
    """Requests sent over the time from the level's start to the last send (requests/s)."""
    window: Window | None = None
    t0_ns: int | None = None
    """The level's start on this process's clock (perf ns, CLOCK_MONOTONIC on Linux): the common start of the
    level's processes when the parent gave one. Every open-loop record obeys t_start_ns - sched_ns - queue_ns -
    late_ns == t0_ns (``kit verify`` checks it)."""
    start_skew_ns: int | None = None
    """How long after the common start this process was ready to start (its users spawned); flagged above the
    lateness limit (kit.load.assess). None: no common start (a level of its own, older kits)."""


class ClientReport(_Open):
    """The whole ``client.json``."""

    format_version: int = Field(1, alias="schema")
    """The file's format version (written as ``schema``)."""
    spec: dict[str, object]
    """The level spec (``kit.load.LevelSpec`` as a dict: URL, endpoint, model, concurrency, budgets, tags)."""
    processes: int
    usable_cores: int
    ok: int
    errors: int
    out_tokens: int
    wall_s: float
    tokens_per_s: float
    stopped: bool
    client_bound: bool
    client_bound_reasons: list[str]
    timing_warnings: list[str]
    ttft_client_bound: bool = False
    """No TTFT verdict at this level: the client's own share of TTFT p99 may exceed 5 ms (or ``client_bound``)."""
    ttft_client_bound_reasons: list[str] = []
    ttft_client_share_p99_ms: float | None = None
    """The larger of the first-chunk read lag p99 and the lag probe p99 over the processes (None: older file)."""
    thresholds: dict[str, float]
    start_ns: int | None = None
    """The common start the parent gave every driver process of the level (CLOCK_MONOTONIC ns; None: older kits)."""
    workers: list[WorkerStats]
