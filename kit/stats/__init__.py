"""Summaries and A/B verdicts from a bundle's raw per-request records; the method is described in docs/statistics.md.

``kit.stats.bundle`` is the only module that reads files; the others compute.
"""

from __future__ import annotations

from kit.stats.ab import LevelSamples, compare_levels, experts_comparison, family
from kit.stats.bootstrap import (
    ArmBootstrap,
    CellSample,
    bootstrap_arm,
    calibrated_log_replicates,
    extrapolated_interval,
)
from kit.stats.bundle import summarize_bundle, summary_of
from kit.stats.figures import (
    arm_level_figures,
    cell_level_figures,
    client_figures,
    distribution,
    latency_figures,
    mean_ci,
    spread,
    throughput,
)
from kit.stats.metrics import EXPERTS, LATENCIES, PERCENTILES, SCHEMA_VERSION, SIG_DIGITS, TESTED, THROUGHPUT, Metric
from kit.stats.model import Welch, fisher_p, holm_levels, welch
from kit.stats.numbers import clean, pct_text, round_sig
from kit.stats.requests import LevelRecords, RequestMetrics, is_ok, output_tokens, reduce_records, request_metrics
from kit.stats.server import server_figures
from kit.stats.shapes import SummaryDoc
from kit.stats.tdist import t_quantile, z_quantile
from kit.stats.verdict import verdict_text

__all__ = [
    "EXPERTS",
    "LATENCIES",
    "PERCENTILES",
    "SCHEMA_VERSION",
    "SIG_DIGITS",
    "TESTED",
    "THROUGHPUT",
    "ArmBootstrap",
    "CellSample",
    "LevelRecords",
    "LevelSamples",
    "Metric",
    "RequestMetrics",
    "SummaryDoc",
    "Welch",
    "arm_level_figures",
    "bootstrap_arm",
    "calibrated_log_replicates",
    "cell_level_figures",
    "clean",
    "client_figures",
    "compare_levels",
    "distribution",
    "experts_comparison",
    "extrapolated_interval",
    "family",
    "fisher_p",
    "holm_levels",
    "is_ok",
    "latency_figures",
    "mean_ci",
    "output_tokens",
    "pct_text",
    "reduce_records",
    "request_metrics",
    "round_sig",
    "server_figures",
    "spread",
    "summarize_bundle",
    "summary_of",
    "t_quantile",
    "throughput",
    "verdict_text",
    "welch",
    "z_quantile",
]
