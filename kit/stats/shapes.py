"""The shapes of the figures the compute modules return (they become summary.json as they are).

These are the producer's side of ``kit.files.summary`` (the pydantic models readers use); a test checks that
the models read back every summary these shapes make, unchanged.
"""

from __future__ import annotations

from typing import NotRequired, TypedDict


class ErrorReason(TypedDict):
    reason: str
    count: int


class Distribution(TypedDict):
    n: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    p50_ci: NotRequired[list[float] | None]  # arm figures only: between-cell interval of the p50


class Spread(TypedDict):
    n: int
    min: float | None
    max: float | None
    sd: float | None
    cv_pct: float | None


class ClientFigures(TypedDict):
    client_bound: bool
    client_bound_reasons: list[str]
    ttft_client_bound: bool  # the client's own share of TTFT p99 is too large: no TTFT verdict
    ttft_client_bound_reasons: list[str]
    client_checked: bool
    timing_warnings: list[str]


class ServerFigures(TypedDict):
    unique_experts_per_step: float | None
    unique_experts_by_layer: dict[str, float]
    step_ms: float | None
    steps: float | None
    decode_batch: float | None


class LatencyFigures(TypedDict):
    ttft_ms: Distribution
    tpot_ms: Distribution
    itl_ms: Distribution
    e2e_ms: Distribution


class CellLevelFigures(LatencyFigures, ClientFigures):
    requests: int
    ok: int
    errors: int
    error_reasons: list[ErrorReason]
    unparsable_lines: int
    tokens_mismatch: int
    short_responses: int
    usage_flagged: int
    output_tokens: float
    wall_s: float | None
    throughput_req_s: float | None
    throughput_tok_s: float | None
    server: ServerFigures | None


class CellLevelEntry(CellLevelFigures, total=False):
    # schema 5: the pre-registered cell statistic of each tested metric, what the A/B test compared (included cells)
    cell_values: dict[str, float | None]


class ArmServer(TypedDict):
    unique_experts_per_step: float | None
    step_ms: float | None
    decode_batch: float | None
    unique_experts_per_step_cells: list[float | None]
    cells: int


class BetweenCells(TypedDict):
    throughput_tok_s: Spread
    throughput_req_s: Spread
    ttft_mean_ms: Spread
    tpot_mean_ms: Spread
    itl_mean_ms: Spread
    e2e_mean_ms: Spread


class ArmLevelFigures(LatencyFigures):
    cells: int
    cell_ids: list[str]
    requests: int
    ok: int
    errors: int
    short_responses: int
    usage_flagged: int
    output_tokens: float
    throughput_tok_s: float | None
    throughput_req_s: float | None
    throughput_tok_s_ci: list[float] | None
    client_bound: bool
    client_bound_cells: list[str]
    between_cells: BetweenCells
    server: ArmServer | None


class CellCounts(TypedDict):
    arm: int
    baseline: int


class ErrorCounts(TypedDict):
    arm_failed: int
    arm_requests: int
    baseline_failed: int
    baseline_requests: int
    test: str
    p: float | None


class LengthCounts(TypedDict):
    arm_short: int
    arm_ok: int
    baseline_short: int
    baseline_ok: int
    test: str
    p: float | None


class UsageCounts(TypedDict):
    arm_flagged: int
    arm_ok: int
    baseline_flagged: int
    baseline_ok: int
    test: str


class Comparison(TypedDict):
    arm: str
    baseline: str
    level: int
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    tested: bool
    role: str
    arm_value: float
    baseline_value: float
    ratio: float
    ratio_ci: list[float] | None
    diff: float
    diff_ci: list[float] | None
    change_pct: float
    change_pct_ci: list[float] | None
    cells: CellCounts
    method: str
    df: float | None
    p_value: float | None
    interval_confidence: float | None
    significant: bool | None
    client_bound: bool
    status: str
    errors: ErrorCounts
    lengths: LengthCounts | None
    usage: UsageCounts | None
    verdict: str


class ArmLevelEntry(ArmLevelFigures):
    arm: str
    level: int


class CellEntry(TypedDict):
    id: str
    arm: str
    repeat: int
    index: int
    status: str
    reason: str | None
    included: bool
    levels: dict[str, CellLevelEntry]  # by concurrency, as a string


class FailedCell(TypedDict):
    id: str
    arm: str
    repeat: int
    status: str
    reason: str | None


class LevelEntry(TypedDict):
    concurrency: int
    requests: int | None  # as planned
    warmup: int | None
    client_bound: bool
    client_bound_cells: list[str]


class Analysis(TypedDict):
    confidence: float
    primary: str
    secondary: list[str]
    family_size: int
    secondary_family_size: int
    adjusted_confidence: float
    correction: str
    resamples: int
    seed: int
    method: str
    min_cells: int
    error_test: str
    length_test: str
    usage_test: str
    censoring: str
    tested_metrics: list[str]
    descriptive_metrics: list[str]
    output_tokens_requested: int
    docs: str
    comparison_method: str  # schema 5: welch | blocked (analysis.method)
    cell_statistic: str  # schema 5: mean | geomean | trimmed | p50 | p90 | p99 (analysis.statistic)
    cell_statistic_trim: float | None  # schema 5: trimmed: the fraction cut from each tail
    slo: dict[str, float | None] | None  # schema 5: analysis.slo's bounds in ms


class GoodputCell(TypedDict):
    """One included cell at one level under analysis.slo (schema 5)."""

    cell: str
    arm: str
    level: int
    requests: int  # every request, failed ones too
    good: int  # ok requests meeting every bound
    wall_s: float | None
    goodput_req_s: float | None
    slo_attainment: float | None


class SummaryDoc(TypedDict):
    schema_version: int
    experiment: str
    arms: list[str]
    baseline: str
    levels: list[LevelEntry]
    analysis: Analysis
    cells: list[CellEntry]
    failed_cells: list[FailedCell]
    arm_levels: list[ArmLevelEntry]
    comparisons: list[Comparison]
    goodput: list[GoodputCell]  # schema 5: empty without analysis.slo
