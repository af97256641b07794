"""Summaries and A/B confidence intervals from a bundle's raw per-request records.

Everything here is computed from ``cells/<id>/level-<c>/records.jsonl`` (plus ``client.json`` and the optional
``server_metrics.json``); ``summarize_bundle`` is the only function that reads files.

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
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kit.errors import BundleError
from kit.manifest import load_manifest

SCHEMA_VERSION = 1
SIG_DIGITS = 6
PERCENTILES = (50, 90, 99)
LATENCIES = ("ttft", "tpot", "itl", "e2e")
CENTRAL_TAIL = 0.025  # the bootstrap percentiles that are measured, then extrapolated
MAX_GATHER = 1 << 21  # elements per bootstrap gather batch (bounds memory on large runs)
T_EXACT_MAX_DF = 1000  # above this, Student's t is the normal distribution for our purposes

FArray = npt.NDArray[np.float64]
IArray = npt.NDArray[np.int64]

# Columns of a cell's per-request matrix (one row per ok request).
C_TTFT, C_E2E, C_TPOT, C_TPOT_OK, C_ITL_SUM, C_ITL_N, C_TOKENS, C_ONE = range(8)
N_COLS = 8


# --------------------------------------------------------------------------- metric definitions


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
EXPERTS = Metric("unique_experts_per_step", "unique experts/step", "experts", False)


# --------------------------------------------------------------------------- per request


@dataclass(frozen=True)
class RequestMetrics:
    ttft_ms: float
    tpot_ms: float | None
    itl_ms: list[float]
    e2e_ms: float
    tokens: int


def is_ok(rec: Mapping[str, Any]) -> bool:
    return rec.get("status") == 200 and rec.get("error") is None and rec.get("ttft_ns") is not None


def output_tokens(rec: Mapping[str, Any]) -> int:
    """The server's count (``usage_completion_tokens``) when present, else the client's chunk count."""
    usage = rec.get("usage_completion_tokens")
    if isinstance(usage, int) and not isinstance(usage, bool):
        return usage
    client = rec.get("client_tokens")
    return client if isinstance(client, int) and not isinstance(client, bool) else len(rec.get("chunk_ns") or [])


def tpot_ns(ttft: float, e2e: float, tokens: int) -> float | None:
    return (e2e - ttft) / (tokens - 1) if tokens > 1 else None


def request_metrics(rec: Mapping[str, Any]) -> RequestMetrics | None:
    """One ok request's metrics in ms (None for a request that is not ok)."""
    if not is_ok(rec):
        return None
    ttft, e2e, tokens = float(rec["ttft_ns"]), float(rec["e2e_ns"]), output_tokens(rec)
    chunks = [float(c) for c in rec.get("chunk_ns") or []]
    tpot = tpot_ns(ttft, e2e, tokens)
    return RequestMetrics(
        ttft_ms=ttft / 1e6,
        tpot_ms=None if tpot is None else tpot / 1e6,
        itl_ms=[(b - a) / 1e6 for a, b in itertools.pairwise(chunks)],
        e2e_ms=e2e / 1e6,
        tokens=tokens,
    )


@dataclass(frozen=True)
class LevelRecords:
    """The records of one cell at one level, reduced to arrays (ms)."""

    matrix: FArray  # (ok requests, N_COLS)
    gaps: FArray  # every inter-chunk gap of the ok requests
    requests: int
    errors: int
    error_reasons: list[dict[str, Any]]
    wall_s: float | None
    tokens_mismatch: int
    unparsable_lines: int

    @property
    def ok(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def output_tokens(self) -> float:
        return float(self.matrix[:, C_TOKENS].sum())

    def column(self, col: int) -> FArray:
        return self.matrix[:, col]

    def tpot(self) -> FArray:
        m = self.matrix
        out: FArray = m[m[:, C_TPOT_OK] > 0, C_TPOT]
        return out


def reduce_records(records: Iterable[Mapping[str, Any]], unparsable: int = 0) -> LevelRecords:
    """Per-request metrics of many records, vectorised: chunk lists are flattened once for the ITL gaps."""
    rows: list[tuple[float, ...]] = []
    flat: list[int] = []
    lengths: list[int] = []
    errors: Counter[str] = Counter()
    starts: list[float] = []
    ends: list[float] = []
    mismatch = total = 0
    for rec in records:
        total += 1
        ws, e2e = rec.get("wall_start"), rec.get("e2e_ns")
        if isinstance(ws, (int, float)):
            starts.append(float(ws))
            ends.append(float(ws) + (float(e2e) / 1e9 if isinstance(e2e, (int, float)) else 0.0))
        if not is_ok(rec):
            errors[_error_reason(rec)] += 1
            continue
        ttft, e2e_f, tokens = float(rec["ttft_ns"]), float(rec["e2e_ns"]), output_tokens(rec)
        chunks = rec.get("chunk_ns") or []
        client = rec.get("client_tokens")
        if isinstance(rec.get("usage_completion_tokens"), int) and isinstance(client, int) and client != tokens:
            mismatch += 1
        tpot = tpot_ns(ttft, e2e_f, tokens)
        n = len(chunks)
        itl_sum = float(chunks[-1] - chunks[0]) if n > 1 else 0.0
        rows.append((ttft, e2e_f, tpot or 0.0, 0.0 if tpot is None else 1.0, itl_sum, max(n - 1, 0), tokens, 1.0))
        if n:
            flat.extend(chunks)
            lengths.append(n)
    matrix = np.array(rows, dtype=np.float64).reshape(-1, N_COLS)
    for col in (C_TTFT, C_E2E, C_TPOT, C_ITL_SUM):
        matrix[:, col] /= 1e6
    return LevelRecords(
        matrix=matrix,
        gaps=_gaps_ms(flat, lengths),
        requests=total,
        errors=sum(errors.values()),
        error_reasons=[{"reason": r, "count": c} for r, c in sorted(errors.items(), key=lambda x: (-x[1], x[0]))[:5]],
        wall_s=(max(ends) - min(starts)) if starts else None,
        tokens_mismatch=mismatch,
        unparsable_lines=unparsable,
    )


def _error_reason(rec: Mapping[str, Any]) -> str:
    if rec.get("error") is not None:
        return str(rec["error"])[:160]
    if rec.get("status") != 200:
        return f"http {rec.get('status')}"
    return "no content chunk"


def _gaps_ms(flat: list[int], lengths: list[int]) -> FArray:
    if not flat:
        return np.zeros(0)
    gaps = np.diff(np.fromiter(flat, dtype=np.int64, count=len(flat)))
    boundaries = np.cumsum(np.asarray(lengths[:-1], dtype=np.int64)) - 1  # last chunk of j -> first of j+1
    keep = np.ones(gaps.shape[0], dtype=bool)
    keep[boundaries] = False
    out: FArray = gaps[keep].astype(np.float64) / 1e6
    return out


# --------------------------------------------------------------------------- figures


def distribution(values: FArray) -> dict[str, Any]:
    """p50/p90/p99/mean of a sample (None when empty)."""
    if values.size == 0:
        return {"n": 0, "mean": None, **{f"p{p}": None for p in PERCENTILES}}
    pct = np.percentile(values, PERCENTILES)
    return {"n": int(values.size), "mean": float(values.mean()),
            **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)}}


def latency_figures(lr_list: Sequence[LevelRecords]) -> dict[str, dict[str, Any]]:
    """TTFT/TPOT/ITL/E2E distributions pooled over the given cells' ok requests."""
    def pool(get: Any) -> FArray:
        parts = [get(lr) for lr in lr_list]
        return np.concatenate(parts) if parts else np.zeros(0)

    return {
        "ttft_ms": distribution(pool(lambda lr: lr.column(C_TTFT))),
        "tpot_ms": distribution(pool(lambda lr: lr.tpot())),
        "itl_ms": distribution(pool(lambda lr: lr.gaps)),
        "e2e_ms": distribution(pool(lambda lr: lr.column(C_E2E))),
    }


def throughput(lr: LevelRecords) -> tuple[float | None, float | None]:
    """(requests/s, output tokens/s) of ok requests over the level's wall time."""
    if not lr.wall_s or lr.wall_s <= 0:
        return None, None
    return lr.ok / lr.wall_s, lr.output_tokens / lr.wall_s


def cell_level_figures(lr: LevelRecords, client: Mapping[str, Any] | None,
                       server: Mapping[str, Any] | None) -> dict[str, Any]:
    req_s, tok_s = throughput(lr)
    return {
        "requests": lr.requests,
        "ok": lr.ok,
        "errors": lr.errors,
        "error_reasons": lr.error_reasons,
        "unparsable_lines": lr.unparsable_lines,
        "tokens_mismatch": lr.tokens_mismatch,
        "output_tokens": lr.output_tokens,
        "wall_s": lr.wall_s,
        "throughput_req_s": req_s,
        "throughput_tok_s": tok_s,
        **latency_figures([lr]),
        **client_figures(client),
        "server": server_figures(server),
    }


def client_figures(client: Mapping[str, Any] | None) -> dict[str, Any]:
    if client is None:
        return {"client_bound": False, "client_bound_reasons": [], "client_checked": False, "timing_warnings": []}
    reasons = [str(r) for r in client.get("client_bound_reasons") or []]
    return {"client_bound": bool(client.get("client_bound")) or bool(reasons),
            "client_bound_reasons": reasons, "client_checked": True,
            "timing_warnings": [str(w) for w in client.get("timing_warnings") or []]}


_SAMPLE_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?$")
_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _parse_samples(samples: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    if not isinstance(samples, Mapping):
        return out
    for key, value in samples.items():
        m = _SAMPLE_RE.match(str(key).strip())
        if m is None or not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            continue
        labels = tuple(sorted(_LABEL_RE.findall(m.group(2) or "")))
        out[(m.group(1), labels)] = float(value)
    return out


def server_figures(metrics: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Deltas of the embedded engine's counters over a level (None when the server exposes none of them)."""
    if not metrics or not isinstance(metrics.get("before"), Mapping) or not isinstance(metrics.get("after"), Mapping):
        return None  # without both scrapes there is no delta over the level
    before, after = _parse_samples(metrics["before"]), _parse_samples(metrics["after"])

    def delta(name: str, labels: tuple[tuple[str, str], ...] = ()) -> float | None:
        if (name, labels) not in after:
            return None
        return after[(name, labels)] - before.get((name, labels), 0.0)

    def mean_of(base: str, labels: tuple[tuple[str, str], ...] = ()) -> float | None:
        s, c = delta(base + "_sum", labels), delta(base + "_count", labels)
        return s / c if s is not None and c else None

    by_layer: dict[str, float] = {}
    for name, labels in sorted(after):
        if name == "kit_engine_unique_experts_sum":
            value = mean_of("kit_engine_unique_experts", labels)
            layer = dict(labels).get("layer", "")
            if value is not None:
                by_layer[layer] = value
    step = mean_of("kit_engine_step_seconds")
    out = {
        "unique_experts_per_step": statistics.fmean(by_layer.values()) if by_layer else None,
        "unique_experts_by_layer": dict(sorted(by_layer.items(), key=lambda kv: _layer_key(kv[0]))),
        "step_ms": None if step is None else step * 1e3,
        "steps": delta("kit_engine_step_seconds_count"),
        "decode_batch": mean_of("kit_engine_batch_size"),
    }
    return out if any(v not in (None, {}) for v in out.values()) else None


def _layer_key(layer: str) -> tuple[int, str]:
    return (int(layer), "") if layer.isdigit() else (1 << 30, layer)


def spread(values: Sequence[float]) -> dict[str, Any]:
    """Between-cell spread of per-cell figures."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"n": 0, "min": None, "max": None, "sd": None, "cv_pct": None}
    sd = statistics.stdev(vals) if len(vals) > 1 else None
    mean = statistics.fmean(vals)
    return {"n": len(vals), "min": min(vals), "max": max(vals), "sd": sd,
            "cv_pct": None if sd is None or mean == 0 else 100.0 * sd / abs(mean)}


def mean_ci(center: float | None, values: Sequence[float], confidence: float) -> list[float] | None:
    """center +/- t(K-1) * sd / sqrt(K) over per-cell values (None with fewer than two cells)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if center is None or len(vals) < 2:
        return None
    half = t_quantile(1 - (1 - confidence) / 2, len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals))
    return [center - half, center + half]


def arm_level_figures(cells: Sequence[tuple[str, LevelRecords, dict[str, Any]]],
                      confidence: float) -> dict[str, Any]:
    """Figures of one arm at one level, pooled over its included cells: (cell id, records, cell figures)."""
    lrs = [lr for _, lr, _ in cells]
    figs = [f for _, _, f in cells]
    lat = latency_figures(lrs)
    tok = [f["throughput_tok_s"] for f in figs]
    req = [f["throughput_req_s"] for f in figs]
    tok_mean = _fmean(tok)
    out: dict[str, Any] = {
        "cells": len(cells),
        "cell_ids": [cid for cid, _, _ in cells],
        "requests": sum(lr.requests for lr in lrs),
        "ok": sum(lr.ok for lr in lrs),
        "errors": sum(lr.errors for lr in lrs),
        "output_tokens": sum(lr.output_tokens for lr in lrs),
        "throughput_tok_s": tok_mean,
        "throughput_req_s": _fmean(req),
        "throughput_tok_s_ci": mean_ci(tok_mean, tok, confidence),
        "client_bound": any(f["client_bound"] for f in figs),
        "client_bound_cells": [cid for cid, _, f in cells if f["client_bound"]],
        **lat,
        "between_cells": {
            "throughput_tok_s": spread(tok),
            "throughput_req_s": spread(req),
            **{f"{m}_mean_ms": spread([f[f"{m}_ms"]["mean"] for f in figs]) for m in LATENCIES},
        },
        "server": _arm_server([f["server"] for f in figs]),
    }
    for m in LATENCIES:
        out[f"{m}_ms"]["p50_ci"] = mean_ci(lat[f"{m}_ms"]["p50"], [f[f"{m}_ms"]["p50"] for f in figs], confidence)
    return out


def _fmean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _arm_server(per_cell: Sequence[dict[str, Any] | None]) -> dict[str, Any] | None:
    present = [s for s in per_cell if s is not None]
    if not present:
        return None
    keys = ("unique_experts_per_step", "step_ms", "decode_batch")
    out: dict[str, Any] = {k: _fmean([s[k] for s in present]) for k in keys}
    out["unique_experts_per_step_cells"] = [s["unique_experts_per_step"] for s in present]
    out["cells"] = len(present)
    return out


# --------------------------------------------------------------------------- distributions (numpy only)


def z_quantile(p: float) -> float:
    return statistics.NormalDist().inv_cdf(p)


def _t_central(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan theta) for Student's t with integer df (Abramowitz & Stegun 26.7.3-4)."""
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:
        if df == 1:
            return 2 * theta / math.pi
        term = total = math.cos(theta)
        for k in range(3, df - 1, 2):
            term *= c2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + s * total)
    term = total = 1.0
    for k in range(2, df - 1, 2):
        term *= c2 * (k - 1) / k
        total += term
    return s * total


def t_quantile(p: float, df: int | None) -> float:
    """The p-quantile (p > 0.5) of Student's t with integer df (None or large: the normal)."""
    if df is None or df > T_EXACT_MAX_DF:
        return z_quantile(p)
    if df < 1:
        raise ValueError("df must be >= 1")
    target = 2 * p - 1  # central probability
    lo, hi = 0.0, math.pi / 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if _t_central(mid, df) < target:
            lo = mid
        else:
            hi = mid
    return math.sqrt(df) * math.tan((lo + hi) / 2)


# --------------------------------------------------------------------------- bootstrap


@dataclass(frozen=True)
class CellSample:
    """What the A/B comparison needs of one included cell at one level."""

    cell_id: str
    matrix: FArray  # (ok requests, N_COLS)
    tok_s: float


def _cell_stats(cells: Sequence[CellSample], metrics: Sequence[Metric]) -> FArray:
    """(K, metrics) per-cell statistics."""
    out = np.full((len(cells), len(metrics)), np.nan)
    for i, c in enumerate(cells):
        sums = c.matrix.sum(axis=0)
        out[i] = _stat_from_sums(sums[None, :], np.array([c.tok_s]), metrics)[0]
    return out


def _stat_from_sums(sums: FArray, tok_s: FArray, metrics: Sequence[Metric]) -> FArray:
    out = np.empty((sums.shape[0], len(metrics)))
    with np.errstate(divide="ignore", invalid="ignore"):
        for j, m in enumerate(metrics):
            if m.num is None or m.den is None:
                out[:, j] = tok_s
            else:
                out[:, j] = np.where(sums[:, m.den] > 0, sums[:, m.num] / sums[:, m.den], np.nan)
    return out


@dataclass(frozen=True)
class ArmBootstrap:
    observed: FArray  # (metrics,) the arm's statistics
    replicates: FArray  # (B, metrics)
    cell_stats: FArray  # (K, metrics)


def bootstrap_arm(cells: Sequence[CellSample], metrics: Sequence[Metric], resamples: int,
                  rng: np.random.Generator, *, hierarchical: bool) -> ArmBootstrap:
    """Replicates of each metric's statistic for one arm at one level.

    hierarchical: cells drawn with replacement, then each drawn cell's requests with replacement; throughput is
    the mean of the drawn cells' throughputs. Otherwise cells stay fixed, requests are resampled within each,
    and throughput follows the resampled output tokens per second of request time (Little's law).
    """
    k = len(cells)
    total = np.sum([c.matrix.sum(axis=0) for c in cells], axis=0)
    tok_cells = np.array([c.tok_s for c in cells])
    observed = _stat_from_sums(total[None, :], np.array([tok_cells.mean()]), metrics)[0]
    fixed = np.broadcast_to(np.arange(k), (resamples, k))
    choice = rng.integers(0, k, size=(resamples, k)) if hierarchical else fixed
    sums = np.zeros((resamples, N_COLS))
    for c, cell in enumerate(cells):
        rows = np.nonzero(choice == c)[0]
        _add_request_resamples(sums, rows, cell.matrix, rng)
    if hierarchical:
        tok_rep = tok_cells[choice].mean(axis=1)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = (sums[:, C_TOKENS] / sums[:, C_E2E]) / (total[C_TOKENS] / total[C_E2E])
        tok_rep = tok_cells.mean() * rate
    return ArmBootstrap(observed, _stat_from_sums(sums, tok_rep, metrics), _cell_stats(cells, metrics))


def _add_request_resamples(sums: FArray, rows: IArray, matrix: FArray, rng: np.random.Generator) -> None:
    """For each replicate index in ``rows``, add the column sums of one with-replacement resample of ``matrix``.

    Columns that are constant within the cell (the count, usually the token count) add n x value without
    gathering; the others are gathered column by column from int32 indices, in batches of MAX_GATHER elements.
    """
    n = matrix.shape[0]
    if n == 0 or rows.size == 0:
        return
    b = sums.shape[0]
    cols = np.ascontiguousarray(matrix.T)
    varying = [j for j in range(N_COLS) if cols[j].min() != cols[j].max()]
    times = np.bincount(rows, minlength=b).astype(np.float64)
    for j in range(N_COLS):
        if j not in varying:
            sums[:, j] += times * (n * cols[j, 0])
    if not varying:
        return
    batch = max(1, MAX_GATHER // n)
    for start in range(0, rows.size, batch):
        part = rows[start:start + batch]
        idx = rng.integers(0, n, size=(part.size, n), dtype=np.int32)
        for j in varying:
            drawn = np.take(cols[j], idx).sum(axis=1)
            sums[:, j] += np.bincount(part, weights=drawn, minlength=b)


def calibrated_log_replicates(boot: ArmBootstrap, *, calibrate: bool) -> FArray:
    """Log replicates, rescaled per metric so their variance is the unbiased between-cell variance / K."""
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(boot.replicates)
        cell_logs = np.log(boot.cell_stats)
    if not calibrate:
        return logs
    out = logs.copy()
    for j in range(logs.shape[1]):
        y = cell_logs[:, j][np.isfinite(cell_logs[:, j])]
        r = logs[:, j][np.isfinite(logs[:, j])]
        if y.size < 2 or r.size < 2:
            continue
        var_boot = float(np.var(r, ddof=1))
        if var_boot <= 0:
            continue
        factor = math.sqrt(float(np.var(y, ddof=1)) / y.size / var_boot)
        center = float(np.mean(r))
        out[:, j] = center + factor * (logs[:, j] - center)
    return out


def extrapolated_interval(estimate: float, replicates: FArray, tail: float, df: int | None) -> tuple[float, float]:
    """A percentile interval with two-sided tail ``tail`` (e.g. alpha/m), extrapolated from the central one.

    The distances from the replicates' median to their 2.5 and 97.5 % percentiles are multiplied by
    crit(1 - tail/2) / z(0.975), where crit is Student's t with ``df`` (the normal when None), and laid off
    from the point estimate.
    """
    r = replicates[np.isfinite(replicates)]
    if r.size == 0 or not math.isfinite(estimate):
        return math.nan, math.nan
    med, q_lo, q_hi = np.percentile(r, [50.0, 100 * CENTRAL_TAIL, 100 * (1 - CENTRAL_TAIL)])
    stretch = t_quantile(1 - tail / 2, df) / z_quantile(1 - CENTRAL_TAIL)
    return estimate - stretch * float(med - q_lo), estimate + stretch * float(q_hi - med)


# --------------------------------------------------------------------------- comparisons


@dataclass(frozen=True)
class LevelSamples:
    level: int
    arms: dict[str, list[CellSample]]
    client_bound: dict[str, bool]  # per arm: any included cell client-bound
    experts: dict[str, float | None]  # per arm: mean unique experts/step


def _rng(seed: int, arm: str, level: int, hierarchical: bool) -> np.random.Generator:
    words = [seed % (1 << 63), zlib.crc32(arm.encode()), level, int(hierarchical)]
    return np.random.default_rng(np.random.SeedSequence(words))


def _has_data(cells: Sequence[CellSample], metric: Metric) -> bool:
    if not cells:
        return False
    if metric.num is None or metric.den is None:
        return all(math.isfinite(c.tok_s) and c.tok_s > 0 for c in cells)
    num = sum(float(c.matrix[:, metric.num].sum()) for c in cells)
    den = sum(float(c.matrix[:, metric.den].sum()) for c in cells)
    return den > 0 and num > 0


def family(levels: Sequence[LevelSamples], arms: Sequence[str], baseline: str) -> list[tuple[str, int, Metric]]:
    """Every (arm, level, metric) tested: the Bonferroni family."""
    out = []
    for arm in arms:
        if arm == baseline:
            continue
        for ls in levels:
            a, b = ls.arms.get(arm, []), ls.arms.get(baseline, [])
            out += [(arm, ls.level, m) for m in TESTED if _has_data(a, m) and _has_data(b, m)]
    return out


@dataclass
class _Comparer:
    seed: int
    resamples: int
    confidence: float
    family_size: int
    calibrate: bool
    cache: dict[tuple[str, int, bool], tuple[ArmBootstrap, FArray]]

    @property
    def tail(self) -> float:
        return (1 - self.confidence) / max(self.family_size, 1)

    def boot(self, arm: str, ls: LevelSamples, hierarchical: bool) -> tuple[ArmBootstrap, FArray]:
        """The arm's bootstrap at this level and its (calibrated) log replicates, computed once."""
        key = (arm, ls.level, hierarchical)
        if key not in self.cache:
            rng = _rng(self.seed, arm, ls.level, hierarchical)
            boot = bootstrap_arm(ls.arms[arm], TESTED, self.resamples, rng, hierarchical=hierarchical)
            self.cache[key] = (boot, calibrated_log_replicates(boot, calibrate=self.calibrate and hierarchical))
        return self.cache[key]

    def compare(self, arm: str, baseline: str, ls: LevelSamples, metric: Metric) -> dict[str, Any]:
        ka, kb = len(ls.arms[arm]), len(ls.arms[baseline])
        hierarchical = min(ka, kb) >= 2
        (ba, logs_a), (bb, logs_b) = self.boot(arm, ls, hierarchical), self.boot(baseline, ls, hierarchical)
        j = TESTED.index(metric)
        cal = self.calibrate and hierarchical
        la, lb = logs_a[:, j], logs_b[:, j]
        va, vb = float(ba.observed[j]), float(bb.observed[j])
        df = ka + kb - 2 if cal else None
        log_lo, log_hi = extrapolated_interval(math.log(va / vb), la - lb, self.tail, df)
        diff_lo, diff_hi = extrapolated_interval(va - vb, np.exp(la) - np.exp(lb), self.tail, df)
        ratio = va / vb
        ci = [math.exp(log_lo), math.exp(log_hi)]
        client_bound = ls.client_bound.get(arm, False) or ls.client_bound.get(baseline, False)
        significant = ci[0] > 1 or ci[1] < 1
        single = [a for a, k in ((baseline, kb), (arm, ka)) if k < 2]
        return {
            "arm": arm, "baseline": baseline, "level": ls.level, "metric": metric.key, "label": metric.label,
            "unit": metric.unit, "higher_is_better": metric.higher_is_better, "tested": True,
            "arm_value": va, "baseline_value": vb,
            "ratio": ratio, "ratio_ci": ci,
            "diff": va - vb, "diff_ci": [diff_lo, diff_hi],
            "change_pct": 100 * (ratio - 1), "change_pct_ci": [100 * (ci[0] - 1), 100 * (ci[1] - 1)],
            "cells": {"arm": ka, "baseline": kb},
            "method": "hierarchical" if hierarchical else "requests_only",
            "df": df, "significant": significant, "client_bound": client_bound,
            "status": _status(client_bound, significant),
            "verdict": verdict_text(arm, metric, ratio, ci, client_bound=client_bound, single_cell_arms=single),
        }


def _status(client_bound: bool, significant: bool) -> str:
    if client_bound:
        return "client_bound"
    return "significant" if significant else "not_significant"


def _num(x: float) -> str:
    """A percentage with one decimal; beyond +/-1000 % only the bound is meaningful (few repeats)."""
    if math.isfinite(x) and abs(x) >= 1000:
        return "≥1000" if x > 0 else "≤−1000"
    return f"{x:.1f}".replace("-", "−")


def verdict_text(arm: str, metric: Metric, ratio: float, ci: Sequence[float], *, client_bound: bool,
                 single_cell_arms: Sequence[str] = ()) -> str:
    """'<arm> faster by 12.3 % [9.1, 15.2]' / 'slower by' / 'no significant difference (−1.2 % [−4.0, 1.9])'.

    Percentages are changes of the metric itself relative to the baseline; 'faster' means lower latency or
    higher throughput, and the interval is then given in the same direction as the number.
    """
    change, lo, hi = 100 * (ratio - 1), 100 * (ci[0] - 1), 100 * (ci[1] - 1)
    measured = f"{'+' if change >= 0 else ''}{_num(change)} % [{_num(lo)}, {_num(hi)}]"
    if client_bound:
        text = f"client-bound: not a clean result (measured {measured})"
    elif ci[0] <= 1 <= ci[1]:
        text = f"no significant difference ({measured})"
    else:
        up = ci[0] > 1
        better = up == metric.higher_is_better
        word = "faster" if better else "slower"
        if up:
            text = f"{arm} {word} by {_num(change)} % [{_num(lo)}, {_num(hi)}]"
        else:
            text = f"{arm} {word} by {_num(-change)} % [{_num(-hi)}, {_num(-lo)}]"
    if single_cell_arms:
        text += (f"; repeats could not be resampled (one ok cell for {', '.join(single_cell_arms)}): "
                 "the interval covers request-to-request noise only")
    return text


def experts_comparison(arm: str, baseline: str, ls: LevelSamples) -> dict[str, Any] | None:
    va, vb = ls.experts.get(arm), ls.experts.get(baseline)
    if va is None or vb is None or vb == 0:
        return None
    ratio = va / vb
    return {
        "arm": arm, "baseline": baseline, "level": ls.level, "metric": EXPERTS.key, "label": EXPERTS.label,
        "unit": EXPERTS.unit, "higher_is_better": False, "tested": False,
        "arm_value": va, "baseline_value": vb, "ratio": ratio, "ratio_ci": None,
        "diff": va - vb, "diff_ci": None, "change_pct": 100 * (ratio - 1), "change_pct_ci": None,
        "cells": {"arm": len(ls.arms.get(arm, [])), "baseline": len(ls.arms.get(baseline, []))},
        "method": "descriptive", "df": None, "significant": None,
        "client_bound": ls.client_bound.get(arm, False) or ls.client_bound.get(baseline, False),
        "status": "descriptive",
        "verdict": f"descriptive, not tested: {'+' if ratio >= 1 else ''}{_num(100 * (ratio - 1))} %",
    }


def compare_levels(levels: Sequence[LevelSamples], arms: Sequence[str], baseline: str, *, seed: int,
                   resamples: int, confidence: float, calibrate: bool = True) -> tuple[list[dict[str, Any]], int]:
    """All comparisons (tested ones first in family order, then descriptive ones) and the family size."""
    fam = family(levels, arms, baseline)
    comparer = _Comparer(seed, resamples, confidence, len(fam), calibrate, {})
    by_level = {ls.level: ls for ls in levels}
    out = [comparer.compare(arm, baseline, by_level[level], metric) for arm, level, metric in fam]
    for arm in arms:
        if arm == baseline:
            continue
        for ls in levels:
            extra = experts_comparison(arm, baseline, ls)
            if extra is not None:
                out.append(extra)
    return out, len(fam)


# --------------------------------------------------------------------------- the bundle


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise BundleError(f"{path}: cannot read: {e}") from None


def _read_records(path: Path) -> tuple[list[dict[str, Any]], int] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    out: list[dict[str, Any]] = []
    bad = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if isinstance(rec, dict):
            out.append(rec)
        else:
            bad += 1
    return out, bad


@dataclass(frozen=True)
class _CellInfo:
    id: str
    arm: str
    repeat: int
    index: int
    status: str
    reason: str | None

    @property
    def included(self) -> bool:
        return self.status == "ok"


def _cells(root: Path, plan: Mapping[str, Any]) -> list[_CellInfo]:
    out: list[_CellInfo] = []
    for c in plan.get("cells") or []:
        cid = str(c["id"])
        meta = _read_json(root / "cells" / cid / "cell.json")
        if meta is None:
            status, reason = "missing", "no cell.json: the cell never ran"
        else:
            status, reason = str(meta.get("status", "unknown")), meta.get("reason")
            if reason is None and status == "running":
                reason = "the cell did not finish (interrupted or still running)"
        out.append(_CellInfo(cid, str(c["arm"]), int(c["repeat"]), int(c.get("index", len(out))), status,
                             None if reason is None else str(reason)))
    return out


def _level_dir(root: Path, cell: _CellInfo, level: int) -> Path:
    return root / "cells" / cell.id / f"level-{level}"


def summarize_bundle(root: Path) -> dict[str, Any]:
    """The whole summary of a bundle, recomputed from its raw records (JSON-serialisable, rounded)."""
    return _summarize(Path(root), calibrate=True)


def _summarize(root: Path, *, calibrate: bool) -> dict[str, Any]:
    plan = _read_json(root / "plan.json")
    if not isinstance(plan, dict):
        raise BundleError(f"{root}: no readable plan.json")
    m = load_manifest(root / "manifest.yaml", allow_unpinned=True).manifest
    arms = [a.name for a in m.arms]
    baseline = m.baseline_arm
    conf = m.analysis.confidence
    cells = _cells(root, plan)
    levels_plan = [dict(lv) for lv in plan.get("levels") or []]
    cell_out: dict[str, dict[str, Any]] = {
        c.id: {"id": c.id, "arm": c.arm, "repeat": c.repeat, "index": c.index, "status": c.status,
               "reason": c.reason, "included": c.included, "levels": {}} for c in cells}
    arm_levels: list[dict[str, Any]] = []
    level_out: list[dict[str, Any]] = []
    samples: list[LevelSamples] = []
    for lv in levels_plan:
        level = int(lv["concurrency"])
        per_arm: dict[str, list[tuple[str, LevelRecords, dict[str, Any]]]] = {a: [] for a in arms}
        for c in cells:
            got = _read_records(_level_dir(root, c, level) / "records.jsonl")
            if got is None:
                continue
            d = _level_dir(root, c, level)
            try:
                lr = reduce_records(got[0], got[1])
            except (TypeError, ValueError, KeyError) as e:
                raise BundleError(f"{d / 'records.jsonl'}: malformed record ({type(e).__name__}: {e})") from None
            figs = cell_level_figures(lr, _read_json(d / "client.json"), _read_json(d / "server_metrics.json"))
            cell_out[c.id]["levels"][str(level)] = figs
            if c.included and c.arm in per_arm:
                per_arm[c.arm].append((c.id, lr, figs))
        arm_figs = {a: arm_level_figures(v, conf) for a, v in per_arm.items() if v}
        for a, f in arm_figs.items():
            arm_levels.append({"arm": a, "level": level, **f})
        bound_cells = sorted(cid for v in per_arm.values() for cid, _, f in v if f["client_bound"])
        level_out.append({"concurrency": level, "requests": lv.get("requests"), "warmup": lv.get("warmup"),
                          "client_bound": bool(bound_cells), "client_bound_cells": bound_cells})
        samples.append(LevelSamples(
            level=level,
            arms={a: [CellSample(cid, lr.matrix, f["throughput_tok_s"] or 0.0) for cid, lr, f in v if lr.ok]
                  for a, v in per_arm.items()},
            client_bound={a: f["client_bound"] for a, f in arm_figs.items()},
            experts={a: (f["server"] or {}).get("unique_experts_per_step") for a, f in arm_figs.items()},
        ))
    comparisons, m_size = compare_levels(samples, arms, baseline, seed=m.load.seed, resamples=m.analysis.resamples,
                                         confidence=conf, calibrate=calibrate)
    alpha = 1 - conf
    summary = {
        "schema_version": SCHEMA_VERSION,
        "experiment": m.name,
        "arms": arms,
        "baseline": baseline,
        "levels": level_out,
        "analysis": {
            "confidence": conf,
            "family_size": m_size,
            "adjusted_confidence": 1 - alpha / max(m_size, 1),
            "correction": "bonferroni",
            "resamples": m.analysis.resamples,
            "seed": m.load.seed,
            "method": "hierarchical bootstrap (cells, then requests within cells), percentile intervals "
                      + ("calibrated to the between-cell variance with t(K_a+K_b-2)" if calibrate
                         else "without small-sample calibration"),
            "tested_metrics": [t.key for t in TESTED],
            "descriptive_metrics": [EXPERTS.key],
            "output_tokens_requested": m.load.output_tokens,
        },
        "cells": [cell_out[c.id] for c in cells],
        "failed_cells": [{"id": c.id, "arm": c.arm, "repeat": c.repeat, "status": c.status, "reason": c.reason}
                         for c in cells if not c.included],
        "arm_levels": arm_levels,
        "comparisons": comparisons,
    }
    cleaned: dict[str, Any] = clean(summary)
    return cleaned


# --------------------------------------------------------------------------- output hygiene


def sig(x: float, digits: int = SIG_DIGITS) -> float | None:
    if not math.isfinite(x):
        return None
    r = float(f"{x:.{digits}g}")
    return 0.0 if r == 0 else r


def clean(obj: Any) -> Any:
    """JSON-safe copy: floats rounded to SIG_DIGITS significant digits, NaN/inf -> None, numpy -> Python."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return sig(float(obj))
    if isinstance(obj, Mapping):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [clean(v) for v in obj.tolist()]
    raise TypeError(f"cannot put {type(obj).__name__} in a summary")
