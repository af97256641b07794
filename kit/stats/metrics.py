"""What is measured and compared: the request-matrix columns and the metrics tested between arms."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kit.files.summary import SUMMARY_SCHEMA_VERSION

SCHEMA_VERSION = SUMMARY_SCHEMA_VERSION
SIG_DIGITS = 6
PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")

FArray = npt.NDArray[np.float64]
IArray = npt.NDArray[np.int64]

# Columns of a cell's per-request matrix (one row per ok request).
C_TTFT, C_E2E, C_TPOT, C_TPOT_OK, C_ITL_SUM, C_ITL_N, C_TOKENS, C_ONE = range(8)
N_COLS = 8


@dataclass(frozen=True)
class Metric:
    """A figure compared between arms. ``num``/``den`` are request-matrix columns (None: throughput)."""

    key: str
    label: str
    unit: str
    higher_is_better: bool
    num: int | None = None
    den: int | None = None


THROUGHPUT = Metric("throughput_tok_s", "throughput", "tok/s", True)
TESTED: tuple[Metric, ...] = (
    THROUGHPUT,
    Metric("ttft_mean_ms", "TTFT mean", "ms", False, C_TTFT, C_ONE),
    Metric("tpot_mean_ms", "TPOT mean", "ms", False, C_TPOT, C_TPOT_OK),
    Metric("itl_mean_ms", "ITL mean", "ms", False, C_ITL_SUM, C_ITL_N),
    Metric("e2e_mean_ms", "E2E mean", "ms", False, C_E2E, C_ONE),
)
GOODPUT = Metric("goodput_req_s", "goodput", "req/s", True)  # requests meeting every analysis.slo bound per second
ATTAINMENT = Metric("slo_attainment", "SLO attainment", "", True)  # the fraction of requests meeting every bound
RATES = (THROUGHPUT, GOODPUT, ATTAINMENT)  # cell-level figures: the cell statistic does not apply
EXPERTS = Metric("unique_experts_per_step", "unique experts/step", "experts", False)


def tested(slo: bool) -> tuple[Metric, ...]:
    """The tested metrics: TESTED, and goodput and SLO attainment when the manifest sets analysis.slo."""
    return (*TESTED, GOODPUT, ATTAINMENT) if slo else TESTED
