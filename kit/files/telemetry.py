"""What the server really ran during a level (``kit.telemetry``): two files per level of a cell.

``cells/<id>/level-<c>/telemetry.jsonl``: one ``TelemetrySample`` a line, appended about once a second while the
level runs (a run that dies mid-level keeps every sample written so far): the server's Prometheus gauges and
counters that kit knows (``server``: running and queued requests, KV-cache use, token counters, mapped from each
server's own names; ``series``: the raw samples of those families, ``name{labels}`` -> value) and NVML's readings
of the cell's GPUs.

``cells/<id>/level-<c>/telemetry.json``: the sampler's account of itself (``TelemetryFile``), written when the
level ends: where it looked, which server family each quantity came from, its bounds, how many samples it took
or missed, and its own CPU time (so its cost is a measured fact).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from kit.files.base import BundleFile

QUANTITIES = ("running", "queued", "kv_cache_usage", "kv_tokens", "generated_tokens", "prompt_tokens")


class GpuSample(BaseModel):
    """One GPU at one tick (None: NVML could not tell on this GPU)."""

    model_config = ConfigDict(extra="forbid")

    index: int  # NVML index
    sm_clock_mhz: int | None
    mem_clock_mhz: int | None
    power_w: float | None
    memory_used_mib: int | None
    util_pct: int | None  # NVML's GPU utilisation: share of its last window with a kernel running
    mem_util_pct: int | None
    temperature_c: int | None


class ServerQuantities(BaseModel):
    """The server's figures at one tick, in kit's words (None: the server exposes no such metric). Counts are
    summed over label sets (data-parallel ranks, engines); ``kv_cache_usage`` (0..1) is their maximum."""

    model_config = ConfigDict(extra="forbid")

    running: float | None = None
    queued: float | None = None
    kv_cache_usage: float | None = None
    kv_tokens: float | None = None
    generated_tokens: float | None = None  # cumulative counter
    prompt_tokens: float | None = None  # cumulative counter


class TelemetrySample(BaseModel):
    """One line of ``telemetry.jsonl``."""

    model_config = ConfigDict(extra="forbid")

    t_s: float  # seconds since the sampler started (the level's start), monotonic clock
    scrape_ms: float | None = None  # how long the GET of /metrics took (None: not asked)
    server: ServerQuantities | None = None  # None: no usable /metrics answer at this tick
    series: dict[str, float] = Field(default_factory=dict)
    metrics_error: str | None = None
    gpus: list[GpuSample] | None = None
    gpu_error: str | None = None


class TelemetryBounds(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interval_s: float
    scrape_timeout_s: float  # one GET of /metrics, headers and body, end to end
    max_response_bytes: int
    max_parsed_samples: int  # samples of one response read before it is refused
    max_series: int  # series kept per tick (the rest are counted, not kept)
    max_samples: int  # ticks per level


class TelemetryFile(BundleFile):
    """``cells/<id>/level-<c>/telemetry.json``."""

    file_pattern: ClassVar[str] = "*/level-*/telemetry.json"

    metrics_url: str | None
    started_unix: float | None = None  # time.time() at t_s 0 (records' wall_start is on the same clock)
    gpus: list[int]  # NVML indices sampled (empty: none)
    gpu_unavailable: str | None = None  # why NVML was not sampled when GPUs were asked for
    sources: dict[str, str] = Field(default_factory=dict)  # quantity -> the server metric it was read from
    bounds: TelemetryBounds
    samples: int
    missed_ticks: int  # ticks skipped because the one before ran past its slot
    throttled_ticks: int = 0  # ticks skipped to keep the /metrics scrapes under 5 % of a core (a costly /metrics)
    metrics_errors: int
    first_metrics_error: str | None = None
    series_dropped: int = 0  # series over max_series, summed over ticks
    stopped_early: str | None = None  # why sampling ended before the level did (None: it ran to the end)
    wall_s: float
    cpu_s: float  # the sampler thread's own CPU time (time.thread_time)
    cpu_pct: float  # cpu_s / wall_s, in % of one core


class LevelTelemetry(BaseModel):
    """What a cell's level's telemetry says, descriptively (``kit.stats.telemetry``; never tested): the
    batch the server ran (running requests over the samples), its queue, and the GPUs' state. In
    summary.json under ``cells[].levels[c].telemetry``."""

    model_config = ConfigDict(frozen=True)

    samples: int
    gpus: int = 0  # GPUs sampled through NVML
    running_median: float | None
    running_max: float | None
    queued_median: float | None
    queued_max: float | None
    queued_share: float | None  # share of samples with queued > 0
    kv_cache_usage_max: float | None
    server_tok_s: float | None  # the server's generated-token counter over the sampled span
    sm_clock_mhz_median: float | None  # over GPUs and samples
    power_w_median: float | None  # the cell's GPUs together
    util_pct_median: float | None
    memory_used_mib_max: float | None  # the fullest GPU
    queue_bound: bool | None  # None: no running-request series to judge from
    queue_bound_reason: str | None
    batch_note: str | None = None  # descriptive: the running batch never reached c (not queue-bound by itself)
    sampler_cpu_pct: float | None  # the sampler thread's CPU, % of one core
