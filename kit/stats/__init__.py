"""Summaries and A/B confidence intervals from a bundle's raw per-request records.

Everything here is computed from ``cells/<id>/level-<c>/records.jsonl`` (plus ``client.json`` and the optional
``server_metrics.json``); ``kit.stats.bundle`` is the only module that reads files; the others compute.

Per request (ok = HTTP 200, no error, a first content chunk):

- TTFT = ``ttft_ns``; E2E = ``e2e_ns``;
- tokens = ``usage_completion_tokens`` when the server reported it, else ``client_tokens``;
- TPOT = (E2E - TTFT) / (tokens - 1), only when tokens > 1;
- ITL = every gap between consecutive content chunks (pooled over requests: the ITL mean is
  sum(last chunk - first chunk) / sum(chunks - 1)).

A/B comparison of each non-baseline arm with the baseline, per level, for throughput (output tok/s: the mean of
the cells' figures) and the means of TTFT, TPOT, ITL and E2E (pooled over the arm's cells):

1. A two-stage ("hierarchical") bootstrap that follows the design: each replicate draws the arm's ok cells
   (repeats) with replacement, then the requests of every drawn cell with replacement, and recomputes the
   statistic (throughput: the mean of the drawn cells' throughputs). Arms are resampled independently.
2. Small-sample calibration (only ``K`` repeats per arm, often 3): a two-stage bootstrap under-states the
   between-repeat variance by (K-1)/K and over-states the within-cell one, and a normal-tail interval ignores
   that the variance itself is estimated from a handful of cells. The replicates of each arm (log scale) are
   therefore rescaled to the unbiased between-cell variance of the log cell statistics divided by K, and the
   interval is stretched by t(nu)/z with nu = K_a + K_b - 2 (the degrees of freedom of a cluster-level test).
3. Multiplicity: Bonferroni over every (arm, level, tested metric) in the bundle: each interval is a
   1 - alpha/m percentile interval. Percentiles that far out are poorly resolved by a few thousand replicates,
   so the 2.5/97.5 % percentiles (measured from the replicates' median, which keeps any asymmetry) are
   extrapolated with the quantile ratio crit(1 - alpha/2m)/z(0.975) and placed around the point estimate.

With a single ok cell in either arm at a level, repeats cannot be resampled: the cells are kept fixed, only
requests are resampled (throughput through Little's law: tokens per second of request time), no calibration
is possible, and the verdict says so. Levels where any included cell was client-bound get no clean verdict.

Why means (TTFT included) rather than p50: a mean is a ratio of sums, so the two-stage bootstrap resamples it
smoothly and cheaply (per-request sums and counts, no sorting per replicate), while a median's bootstrap
distribution is lumpy with a few dozen requests per cell; and the mean keeps the queueing tail that a serving
optimisation changes. p50/p90/p99 are reported for every metric, with between-cell intervals, but not tested.
The Bonferroni family includes client-bound levels (their intervals are computed, only the verdict is
withheld), so m does not depend on the client check; unique experts/step is descriptive and outside it.

Replicates are drawn from generators seeded by ``load.seed``, the arm's name and the level, so recomputing a
summary gives identical numbers; every float in the summary is rounded to ``SIG_DIGITS`` significant digits.

Modules: ``bundle`` (reads the files), ``requests`` (per-request metrics, records to arrays), ``server`` (engine
counters), ``figures`` (per cell and per arm), ``tdist`` (t and normal quantiles), ``bootstrap`` (replicates and
intervals), ``ab`` (the comparisons), ``verdict`` (their words), ``summary`` (assembling summary.json),
``numbers`` (rounding and formatting), ``metrics`` (what is measured), ``shapes`` (the figures' types).
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
from kit.stats.numbers import clean, pct_text, round_sig
from kit.stats.requests import LevelRecords, RequestMetrics, is_ok, output_tokens, reduce_records, request_metrics
from kit.stats.server import server_figures
from kit.stats.shapes import SummaryDoc
from kit.stats.tdist import t_quantile, z_quantile
from kit.stats.verdict import verdict_text

__all__ = [
    "EXPERTS", "LATENCIES", "PERCENTILES", "SCHEMA_VERSION", "SIG_DIGITS", "TESTED", "THROUGHPUT",
    "ArmBootstrap", "CellSample", "LevelRecords", "LevelSamples", "Metric", "RequestMetrics", "SummaryDoc",
    "arm_level_figures", "bootstrap_arm", "calibrated_log_replicates", "cell_level_figures", "clean",
    "client_figures", "compare_levels", "distribution", "experts_comparison", "extrapolated_interval", "family",
    "is_ok", "latency_figures", "mean_ci", "output_tokens", "pct_text", "reduce_records", "request_metrics",
    "round_sig", "server_figures", "spread", "summarize_bundle", "summary_of", "t_quantile", "throughput",
    "verdict_text", "z_quantile",
]
