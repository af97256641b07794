"""``summary.json``: a bundle's figures and A/B verdicts, recomputed from its records by ``kit.stats``.

These models are the readers' side (report, compare, verify); ``kit.stats.shapes`` is the producer's. Every
float is rounded to 6 significant digits and NaN/inf are written as null, so numbers are ``float | None``.
``Summary.model_validate(doc).model_dump(exclude_unset=True) == doc`` for every summary kit writes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kit.files.telemetry import LevelTelemetry

SUMMARY_SCHEMA_VERSION = 5  # 3: short_responses and the output-length guardrail; 4: usage_flagged and its guardrail;
# 5: analysis.method (blocked), analysis.statistic, analysis.slo (goodput, SLO attainment), cells' cell_values


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class ErrorReason(_Model):
    reason: str
    count: int


class Distribution(_Model):
    """A latency sample: count, mean and percentiles in ms (None when empty)."""

    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    p50_ci: list[float | None] | None = None  # arm figures only: between-cell interval of the p50


class Spread(_Model):
    """Between-cell spread of per-cell figures."""

    n: int
    min: float | None
    max: float | None
    sd: float | None
    cv_pct: float | None


class ServerFigures(_Model):
    """The embedded engine's counters over a level (deltas between scrapes)."""

    unique_experts_per_step: float | None
    unique_experts_by_layer: dict[str, float]
    step_ms: float | None
    steps: float | None
    decode_batch: float | None


class ArmServer(_Model):
    """Engine figures of an arm at a level: means over its cells."""

    unique_experts_per_step: float | None
    step_ms: float | None
    decode_batch: float | None
    unique_experts_per_step_cells: list[float | None]
    cells: int


class _Latencies(_Model):
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution

    def latency(self, key: str) -> Distribution:
        """One of the four distributions by its key ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")."""
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "itl_ms": self.itl_ms, "e2e_ms": self.e2e_ms}[key]


class CellLevel(_Latencies):
    """One cell at one level."""

    requests: int
    ok: int
    errors: int
    error_reasons: list[ErrorReason]
    unparsable_lines: int
    tokens_mismatch: int
    short_responses: int = 0  # ok requests with fewer output tokens than the manifest asked for (schema 3)
    # ok requests whose server usage count is implausible, below the client's events or above max_tokens (schema 4)
    usage_flagged: int = 0
    output_tokens: float
    wall_s: float | None
    throughput_req_s: float | None
    throughput_tok_s: float | None
    client_bound: bool
    client_bound_reasons: list[str]
    ttft_client_bound: bool = False
    ttft_client_bound_reasons: list[str] = []
    client_checked: bool
    timing_warnings: list[str]
    server: ServerFigures | None
    telemetry: LevelTelemetry | None = None  # what the server ran during the level (kit.stats.telemetry)
    # schema 5: each tested metric's pre-registered cell statistic, the value the A/B test compared (included cells)
    cell_values: dict[str, float | None] | None = None


class BetweenCells(_Model):
    throughput_tok_s: Spread
    throughput_req_s: Spread
    ttft_mean_ms: Spread
    tpot_mean_ms: Spread
    itl_mean_ms: Spread
    e2e_mean_ms: Spread


class ArmLevel(_Latencies):
    """One arm at one level, pooled over its included cells."""

    arm: str
    level: int
    cells: int
    cell_ids: list[str]
    requests: int
    ok: int
    errors: int
    short_responses: int = 0  # schema 3
    usage_flagged: int = 0  # schema 4
    output_tokens: float
    throughput_tok_s: float | None
    throughput_req_s: float | None
    throughput_tok_s_ci: list[float | None] | None
    client_bound: bool
    client_bound_cells: list[str]
    between_cells: BetweenCells
    server: ArmServer | None


class CellCounts(_Model):
    arm: int
    baseline: int


class ErrorCounts(_Model):
    """Failed (error or timeout) and all requests of both arms at a level, pooled over cells, and the test."""

    arm_failed: int
    arm_requests: int
    baseline_failed: int
    baseline_requests: int
    test: str
    p: float | None


class LengthCounts(_Model):
    """Ok requests that returned fewer output tokens than asked ('short'), of all ok requests, in both arms at a
    level, pooled over cells, and the test (schema 3)."""

    arm_short: int
    arm_ok: int
    baseline_short: int
    baseline_ok: int
    test: str
    p: float | None


class UsageCounts(_Model):
    """Ok requests whose server usage count is not believed ('flagged': implausible, below the client's count of
    content events, or above the max_tokens asked), of all ok requests, in both arms at a level (schema 4); any
    flagged request withholds the verdict."""

    arm_flagged: int
    arm_ok: int
    baseline_flagged: int
    baseline_ok: int
    test: str


class Comparison(_Model):
    """An arm against the baseline at one level for one metric (tested, or descriptive)."""

    arm: str
    baseline: str
    level: int
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    tested: bool
    role: str  # primary | secondary | descriptive
    arm_value: float | None
    baseline_value: float | None
    ratio: float | None
    ratio_ci: list[float | None] | None
    diff: float | None
    diff_ci: list[float | None] | None
    change_pct: float | None
    change_pct_ci: list[float | None] | None
    cells: CellCounts
    method: str
    df: float | None  # Welch–Satterthwaite
    p_value: float | None  # unadjusted, two-sided
    interval_confidence: float | None  # the interval's own level (Holm step or Bonferroni)
    significant: bool | None
    client_bound: bool
    # significant | not_significant | client_bound | ttft_client_bound | too_few_cells | error_rate_differs |
    # output_lengths_differ | usage_flagged | descriptive
    status: str
    errors: ErrorCounts
    lengths: LengthCounts | None = None  # schema 3
    usage: UsageCounts | None = None  # schema 4
    verdict: str


class Cell(_Model):
    """A planned cell, how it ended, and its figures per level (keys: the concurrency as a string)."""

    id: str
    arm: str
    repeat: int
    index: int
    status: str
    reason: str | None
    included: bool
    levels: dict[str, CellLevel]


class FailedCell(_Model):
    id: str
    arm: str
    repeat: int
    status: str
    reason: str | None


class Level(_Model):
    concurrency: int
    requests: int | None
    warmup: int | None
    client_bound: bool
    client_bound_cells: list[str]


class Analysis(_Model):
    """The pre-registered analysis (docs/statistics.md): primary metric, families, correction, guardrails."""

    confidence: float
    primary: str
    secondary: list[str]
    family_size: int  # the primary (confirmatory) family: levels x non-baseline arms
    secondary_family_size: int
    adjusted_confidence: float  # Bonferroni level of the primary family (Holm's first step)
    correction: str
    resamples: int
    seed: int
    method: str
    min_cells: int
    error_test: str
    length_test: str | None = None  # schema 3
    usage_test: str | None = None  # schema 4
    censoring: str
    tested_metrics: list[str]
    descriptive_metrics: list[str]
    output_tokens_requested: int
    docs: str
    comparison_method: str | None = None  # schema 5: welch | blocked
    cell_statistic: str | None = None  # schema 5
    cell_statistic_trim: float | None = None  # schema 5
    slo: dict[str, float | None] | None = None  # schema 5


class GoodputCell(_Model):
    """One included cell at one level under analysis.slo (schema 5): goodput as vLLM's --goodput (good requests/s)."""

    cell: str
    arm: str
    level: int
    requests: int
    good: int
    wall_s: float | None
    goodput_req_s: float | None
    slo_attainment: float | None


class SequentialDecision(_Model):
    arm: str
    level: int
    decision: str  # efficacy | futility | withheld | continue
    p_value: float | None
    nominal_p: float | None
    fraction: float | None
    rejected_at_look: int | None
    repeated_ci: list[float] | None = None  # the last look's repeated confidence interval of the ratio
    repeated_confidence: float | None = None  # its simultaneous level over the looks (1 - the family level)


class SequentialInfo(_Model):
    """A sequential design's ending (design.sequential): its looks and why it stopped."""

    spending: str | None
    looks: int
    most_looks: int
    stop: str | None  # decided | max_repeats | time_budget | None
    stopped: str
    cells_used: int
    cells_planned: int
    cells_not_run: int
    comparisons: list[SequentialDecision]


class Summary(_Model):
    """The whole ``summary.json``."""

    schema_version: int = SUMMARY_SCHEMA_VERSION
    experiment: str
    arms: list[str]
    baseline: str
    levels: list[Level]
    analysis: Analysis
    cells: list[Cell]
    failed_cells: list[FailedCell]
    arm_levels: list[ArmLevel]
    comparisons: list[Comparison]
    goodput: list[GoodputCell] | None = None  # schema 5
    sequential: SequentialInfo | None = None  # design.sequential only

    def arm_level(self, arm: str, level: int) -> ArmLevel | None:
        return next((a for a in self.arm_levels if a.arm == arm and a.level == level), None)

    def client_bound_levels(self) -> list[Level]:
        return [lv for lv in self.levels if lv.client_bound]
