"""The manifest's ``analysis`` section: the pre-registered comparison (docs/statistics.md) and kit reproduce's rule
(docs/reproduce.md). Its own module so that models.py stays under the size limit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from kit.manifest.names import Name


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


PrimaryMetric = Literal["tpot_mean_ms", "ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms", "throughput_tok_s"]


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

    confidence: float = Field(0.95, gt=0.5, lt=1.0)
    resamples: Annotated[int, Field(ge=200, le=100_000)] = 2000
    baseline: Name | None = Field(None, description="The reference arm (default: the first arm).")
    reproduce_margin: float = Field(
        0.05, gt=0, lt=1,
        description="kit reproduce's absolute margin (a ratio within [1/(1+m), 1+m]): on an A/B effect where the "
        "original found none, and on each arm's shift with reproduce.same_hardware (docs/reproduce.md)")
    reproduce: Reproduce = Field(default_factory=Reproduce, description="kit reproduce's rule on the A/B effect")


__all__ = ["Analysis", "PrimaryMetric", "Reproduce"]
