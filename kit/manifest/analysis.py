"""The manifest's ``analysis`` section: the pre-registered comparison (docs/statistics.md) and kit reproduce's rule
(docs/reproduce.md). Its own module so that models.py stays under the size limit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kit.manifest.names import Name


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


PrimaryMetric = Literal["tpot_mean_ms", "ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms", "throughput_tok_s",
                        "goodput_req_s", "slo_attainment"]
#: The per-cell statistic of a latency (docs/statistics.md, "The cell statistic").
CellStatistic = Literal["mean", "geomean", "trimmed", "p50", "p90", "p99"]
#: How cells are compared: Welch's t on cells, or a paired t on the per-repeat differences (adjacent in ABBA order).
Method = Literal["welch", "blocked"]
DEFAULT_METHOD: Method = "blocked"  # picked by simulation: docs/statistics.md, "Blocked or Welch"


class Slo(_Model):
    """Per-request latency bounds in ms (any subset, at least one); a request meeting every bound is good
    (good requests per second is vLLM's --goodput; DistServe's goodput is the highest request rate meeting an
    attainment target, which kit does not compute): docs/statistics.md, "Goodput and SLOs"."""

    ttft_ms: float | None = Field(None, gt=0, le=86_400_000, description="TTFT bound, ms")
    tpot_ms: float | None = Field(None, gt=0, le=86_400_000, description="TPOT bound, ms")
    e2e_ms: float | None = Field(None, gt=0, le=86_400_000, description="E2E bound, ms")

    @model_validator(mode="after")
    def _one(self) -> Slo:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("analysis.slo needs at least one bound (ttft_ms, tpot_ms, e2e_ms)")
        return self


class Reproduce(_Model):
    """kit reproduce's pre-registered rule on the A/B effect (docs/reproduce.md)."""

    margin: float = Field(
        0.5, gt=0, le=1,
        description="Equivalence margin on each A/B effect the original found, as a fraction of it on the log scale "
        "(0.5: the new effect within half of the original's); where it found none, analysis.reproduce_margin")
    same_hardware: bool = Field(
        False, description="The re-run is on the original's hardware: each arm's absolute shift between the runs "
        "counts in the verdict (within analysis.reproduce_margin); otherwise it is reported as a fact")


class Analysis(_Model):
    """How arms are compared, pre-registered (signed with the manifest); the method: docs/statistics.md."""

    primary: PrimaryMetric = Field(
        "tpot_mean_ms",
        description="The confirmatory metric: its family is levels x non-baseline arms, corrected with "
        "'correction'; the other tested metrics are secondary (their own family and correction).",
    )
    correction: Literal["holm", "bonferroni"] = Field(
        "holm", description="Family-wise error correction (Holm: same guarantee as Bonferroni, never less power)."
    )

    method: Method = Field(
        DEFAULT_METHOD,
        description="blocked (the default with design.order abba or counterbalanced, picked by simulation): a "
        "paired t on the per-repeat differences of the log cell statistics (the arm's and the baseline's adjacent "
        "cells of one repeat); welch: Welch's t on the cells (the default with any other order, where the pairs do "
        "not alternate and a drift would bias the paired t)")
    statistic: CellStatistic = Field(
        "mean", description="The cell statistic of every tested latency: mean, geomean (geometric mean), trimmed "
        "(mean after cutting analysis.trim of each tail), p50, p90, p99 (percentiles cost power: docs/statistics.md)")
    trim: float = Field(0.1, gt=0, lt=0.5, description="statistic: trimmed: the fraction cut from each tail")
    slo: Slo | None = Field(None, description="Latency bounds: goodput_req_s and slo_attainment per cell, tested "
                            "as secondary metrics (or the primary)")
    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    resamples: Annotated[int, Field(ge=200, le=100_000)] = 2000
    baseline: Name | None = Field(None, description="The reference arm (default: the first arm).")
    reproduce_margin: float = Field(
        0.05, gt=0, lt=1,
        description="kit reproduce's absolute margin (a ratio within [1/(1+m), 1+m]): on an A/B effect where the "
        "original found none, and on each arm's shift with reproduce.same_hardware (docs/reproduce.md)")
    reproduce: Reproduce = Field(default_factory=Reproduce, description="kit reproduce's rule on the A/B effect")

    @model_validator(mode="after")
    def _slo_primary(self) -> Analysis:
        if self.primary in ("goodput_req_s", "slo_attainment") and self.slo is None:
            raise ValueError(f"analysis.primary {self.primary} needs analysis.slo (e.g. slo: {{tpot_ms: 50}})")
        return self


__all__ = ["DEFAULT_METHOD", "Analysis", "CellStatistic", "Method", "PrimaryMetric", "Reproduce", "Slo"]
