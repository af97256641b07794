"""Descriptive figures: one cell at one level, and one arm at one level pooled over its included cells."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal, cast

import numpy as np

from kit.stats.metrics import C_E2E, C_TTFT, PERCENTILES, FArray
from kit.stats.requests import LevelRecords
from kit.stats.server import server_figures
from kit.stats.shapes import (
    ArmLevelFigures,
    ArmServer,
    BetweenCells,
    CellLevelFigures,
    ClientFigures,
    Distribution,
    LatencyFigures,
    ServerFigures,
    Spread,
)
from kit.stats.tdist import t_quantile

LatencyKey = Literal["ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"]
LATENCY_KEYS: tuple[LatencyKey, ...] = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def distribution(values: FArray) -> Distribution:
    """p50/p90/p99/mean of a sample (None when empty)."""
    if values.size == 0:
        return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None}
    p50, p90, p99 = (float(v) for v in np.percentile(values, PERCENTILES))
    return {"n": int(values.size), "mean": float(values.mean()), "p50": p50, "p90": p90, "p99": p99}


def latency_figures(lr_list: Sequence[LevelRecords]) -> LatencyFigures:
    """TTFT/TPOT/ITL/E2E distributions pooled over the given cells' ok requests."""
    def pool(get: Callable[[LevelRecords], FArray]) -> FArray:
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


def cell_level_figures(lr: LevelRecords, client: Mapping[str, object] | None,
                       server: Mapping[str, object] | None, requested: int | None = None) -> CellLevelFigures:
    """One cell at one level, from its reduced records, its ``client.json`` and its ``server_metrics.json``;
    ``requested``: the output tokens each request asked for (the manifest's ``load.output_tokens``)."""
    req_s, tok_s = throughput(lr)
    return {
        "requests": lr.requests,
        "ok": lr.ok,
        "errors": lr.errors,
        "error_reasons": lr.error_reasons,
        "unparsable_lines": lr.unparsable_lines,
        "tokens_mismatch": lr.tokens_mismatch,
        "short_responses": lr.short(requested),
        "usage_flagged": lr.usage_flagged,
        "output_tokens": lr.output_tokens,
        "wall_s": lr.wall_s,
        "throughput_req_s": req_s,
        "throughput_tok_s": tok_s,
        **latency_figures([lr]),
        **client_figures(client),
        "server": server_figures(server),
    }


def client_figures(client: Mapping[str, object] | None) -> ClientFigures:
    if client is None:
        return {"client_bound": False, "client_bound_reasons": [], "ttft_client_bound": False,
                "ttft_client_bound_reasons": [], "client_checked": False, "timing_warnings": []}
    reasons = [str(r) for r in _items(client.get("client_bound_reasons"))]
    ttft_reasons = [str(r) for r in _items(client.get("ttft_client_bound_reasons"))]
    bound = bool(client.get("client_bound")) or bool(reasons)
    return {"client_bound": bound, "client_bound_reasons": reasons,
            "ttft_client_bound": bound or bool(client.get("ttft_client_bound")) or bool(ttft_reasons),
            "ttft_client_bound_reasons": ttft_reasons, "client_checked": True,
            "timing_warnings": [str(w) for w in _items(client.get("timing_warnings"))]}


def _items(value: object) -> list[object]:
    return list(cast(Iterable[object], value)) if value else []  # not iterable: TypeError, as any bad file


def spread(values: Sequence[float | None]) -> Spread:
    """Between-cell spread of per-cell figures."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if not vals:
        return {"n": 0, "min": None, "max": None, "sd": None, "cv_pct": None}
    sd = statistics.stdev(vals) if len(vals) > 1 else None
    mean = statistics.fmean(vals)
    return {"n": len(vals), "min": min(vals), "max": max(vals), "sd": sd,
            "cv_pct": None if sd is None or mean == 0 else 100.0 * sd / abs(mean)}


def mean_ci(center: float | None, values: Sequence[float | None], confidence: float) -> list[float] | None:
    """center +/- t(K-1) * sd / sqrt(K) over per-cell values (None with fewer than two cells)."""
    vals = [v for v in values if v is not None and math.isfinite(v)]
    if center is None or len(vals) < 2:
        return None
    half = t_quantile(1 - (1 - confidence) / 2, len(vals) - 1) * statistics.stdev(vals) / math.sqrt(len(vals))
    return [center - half, center + half]


def arm_level_figures(cells: Sequence[tuple[str, LevelRecords, CellLevelFigures]],
                      confidence: float) -> ArmLevelFigures:
    """Figures of one arm at one level, pooled over its included cells: (cell id, records, cell figures)."""
    lrs = [lr for _, lr, _ in cells]
    figs = [f for _, _, f in cells]
    lat = latency_figures(lrs)
    tok = [f["throughput_tok_s"] for f in figs]
    req = [f["throughput_req_s"] for f in figs]
    tok_mean = _fmean(tok)
    for key in LATENCY_KEYS:
        lat[key]["p50_ci"] = mean_ci(lat[key]["p50"], [f[key]["p50"] for f in figs], confidence)
    between: BetweenCells = {
        "throughput_tok_s": spread(tok),
        "throughput_req_s": spread(req),
        "ttft_mean_ms": spread([f["ttft_ms"]["mean"] for f in figs]),
        "tpot_mean_ms": spread([f["tpot_ms"]["mean"] for f in figs]),
        "itl_mean_ms": spread([f["itl_ms"]["mean"] for f in figs]),
        "e2e_mean_ms": spread([f["e2e_ms"]["mean"] for f in figs]),
    }
    return {
        "cells": len(cells),
        "cell_ids": [cid for cid, _, _ in cells],
        "requests": sum(lr.requests for lr in lrs),
        "ok": sum(lr.ok for lr in lrs),
        "errors": sum(lr.errors for lr in lrs),
        "short_responses": sum(f["short_responses"] for f in figs),
        "usage_flagged": sum(f["usage_flagged"] for f in figs),
        "output_tokens": sum(lr.output_tokens for lr in lrs),
        "throughput_tok_s": tok_mean,
        "throughput_req_s": _fmean(req),
        "throughput_tok_s_ci": mean_ci(tok_mean, tok, confidence),
        "client_bound": any(f["client_bound"] for f in figs),
        "client_bound_cells": [cid for cid, _, f in cells if f["client_bound"]],
        **lat,
        "between_cells": between,
        "server": _arm_server([f["server"] for f in figs]),
    }


def _fmean(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.fmean(vals) if vals else None


def _arm_server(per_cell: Sequence[ServerFigures | None]) -> ArmServer | None:
    present = [s for s in per_cell if s is not None]
    if not present:
        return None
    return {
        "unique_experts_per_step": _fmean([s["unique_experts_per_step"] for s in present]),
        "step_ms": _fmean([s["step_ms"] for s in present]),
        "decode_batch": _fmean([s["decode_batch"] for s in present]),
        "unique_experts_per_step_cells": [s["unique_experts_per_step"] for s in present],
        "cells": len(present),
    }
