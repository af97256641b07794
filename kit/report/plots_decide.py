"""The plots people decide from: the Pareto front per arm (output tokens/s per GPU against tokens/s per user, one
point per level, with the throughput's between-cell interval and client-bound levels ringed in red), latency CDFs
per arm (TTFT and TPOT, one panel per level) and the cells' figures in run order (drift; the arm's mean as a faint
line, client-bound cells ringed). Same conventions as ``kit.report.plots``: Agg canvas, fixed size and dpi, no
Software tag.

Tokens/s per user is 1000 / mean TPOT (the decode speed one user sees, as vLLM's and NVIDIA's Pareto plots use
it); throughput per GPU divides the arm's mean cell throughput by the GPUs the telemetry sampled (a CPU server:
per server, and the axis says so). The CDFs pool the included cells' ok requests, read from records.jsonl.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import BundleError
from kit.files.summary import CellLevel, Summary
from kit.report.plots import MARKERS, PLOT_SIZE, _figure, _fit, _save
from kit.stats.bundle import read_records
from kit.stats.metrics import C_TTFT
from kit.stats.requests import reduce_records

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:gray")
MAX_PANELS = 6  # levels shown side by side; beyond, the first and last ones and evenly spaced ones between


def _color(summary: Summary, arm: str) -> str:
    return COLORS[summary.arms.index(arm) % len(COLORS)]


def _gpus(summary: Summary) -> int:
    return max((f.telemetry.gpus for c in summary.cells for f in c.levels.values() if f.telemetry), default=0)


def _levels(summary: Summary) -> list[int]:
    levels = [lv.concurrency for lv in summary.levels]
    if len(levels) <= MAX_PANELS:
        return levels
    picks = np.linspace(0, len(levels) - 1, MAX_PANELS).round().astype(int)
    return [levels[i] for i in sorted(set(picks.tolist()))]


def plot_pareto(summary: Summary, path: Path) -> Path:
    gpus = _gpus(summary)
    fig = _figure(PLOT_SIZE)
    ax = fig.add_subplot(1, 1, 1)
    clients_bound = False
    for i, arm in enumerate(summary.arms):
        pts = []
        for lv in summary.levels:
            f = summary.arm_level(arm, lv.concurrency)
            if f is None or f.throughput_tok_s is None or not f.tpot_ms.mean:
                continue
            ci = f.throughput_tok_s_ci
            lo, hi = (ci[0], ci[1]) if ci is not None and len(ci) == 2 else (None, None)
            band = (lo / max(gpus, 1), hi / max(gpus, 1)) if lo is not None and hi is not None else None
            pts.append((1000.0 / f.tpot_ms.mean, f.throughput_tok_s / max(gpus, 1), lv.concurrency, f.client_bound,
                        band))
        if not pts:
            continue
        pts.sort(key=lambda p: p[0])
        color = _color(summary, arm)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)], color=color,
                label=arm, linewidth=1.5)
        for x, y, c, bound, band in pts:
            if band is not None:  # the between-cell interval of the arm's throughput (summary.json)
                ax.errorbar([x], [y], yerr=[[max(y - band[0], 0.0)], [max(band[1] - y, 0.0)]], color=color,
                            capsize=3, linewidth=1, fmt="none")
            if bound:
                clients_bound = True
                ax.scatter([x], [y], s=150, facecolors="none", edgecolors="red", linewidths=1.5, zorder=5)
            ax.annotate(f"c={c}" + (" client-bound" if bound else ""), (x, y), textcoords="offset points",
                        xytext=(9, 7) if bound else (4, 4), fontsize=7, color="red" if bound else color)
    ax.set_xlabel("tokens/s per user (1000 / mean TPOT ms)")
    ax.set_ylabel("output tokens/s per GPU" if gpus else "output tokens/s per server (no GPU sampled)")
    ax.margins(x=0.08, y=0.1)
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    per = f"per GPU ({gpus} GPU{'s' if gpus != 1 else ''})" if gpus else "per server"
    ringed = "; red ring: client-bound level" if clients_bound else ""
    ax.set_title(f"{summary.experiment}: throughput {per} against speed per user\none point per level, up and "
                 f"right is better; bars: between-cell interval{ringed}", fontsize=8)
    _fit(fig, top_in=0.5)
    return _save(fig, path)


def _latencies(root: Path, summary: Summary, arm: str, level: int) -> tuple[np.ndarray[Any, Any],
                                                                          np.ndarray[Any, Any]]:
    ttft: list[np.ndarray[Any, Any]] = []
    tpot: list[np.ndarray[Any, Any]] = []
    for cell in summary.cells:
        if cell.arm != arm or not cell.included or str(level) not in cell.levels:
            continue
        try:
            stream = read_records(root / "cells" / cell.id / f"level-{level}" / "records.jsonl")
            if stream is None:
                continue
            lr = reduce_records(stream, requested=summary.analysis.output_tokens_requested)
        except (BundleError, TypeError, ValueError, KeyError):
            continue  # the report is a courtesy; kit verify and the summary judge the records
        ttft.append(lr.column(C_TTFT))
        tpot.append(lr.tpot())
    pool = [np.concatenate(x) if x else np.zeros(0) for x in (ttft, tpot)]
    return pool[0][np.isfinite(pool[0])], pool[1][np.isfinite(pool[1])]


def plot_cdfs(root: Path, summary: Summary, path: Path) -> Path:
    levels = _levels(summary)
    fig = _figure((max(PLOT_SIZE[0], 2.6 * len(levels)), PLOT_SIZE[1] * 1.5))
    for col, level in enumerate(levels):
        for row, what in enumerate(("TTFT", "TPOT")):
            ax = fig.add_subplot(2, len(levels), row * len(levels) + col + 1)
            for arm in summary.arms:
                values = _latencies(root, summary, arm, level)[row]
                if values.size == 0:
                    continue
                xs = np.sort(values)
                ax.step(xs, np.arange(1, xs.size + 1) / xs.size, where="post", color=_color(summary, arm),
                        label=f"{arm} (n={xs.size})", linewidth=1.3)
            ax.set_title(f"{what} at c={level}", fontsize=9)
            ax.set_ylim(0, 1.02)
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize=7)
            if row == 1:
                ax.set_xlabel("ms", fontsize=8)
            if col == 0:
                ax.set_ylabel("share of requests ≤ x", fontsize=8)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="lower right", fontsize=6)
    fig.suptitle(f"{summary.experiment}: latency CDFs per arm (ok requests of the included cells, pooled); "
                 "left is faster", fontsize=10)
    _fit(fig, top_in=0.6, hspace=0.5)
    return _save(fig, path)


def _cell_figure(f: CellLevel, row: int) -> float | None:
    return f.throughput_tok_s if row == 0 else f.tpot_ms.mean


def plot_drift(summary: Summary, path: Path) -> Path:
    levels = _levels(summary)
    fig = _figure((max(PLOT_SIZE[0], 2.6 * len(levels)), PLOT_SIZE[1] * 1.4))
    order = sorted(summary.cells, key=lambda c: c.index)
    for col, level in enumerate(levels):
        for row, label in enumerate(("output tok/s", "TPOT mean ms")):
            ax = fig.add_subplot(2, len(levels), row * len(levels) + col + 1)
            for i, arm in enumerate(summary.arms):
                pts = [(c.index + 1, _cell_figure(c.levels[str(level)], row)) for c in order
                       if c.arm == arm and str(level) in c.levels and c.included]
                xs = [float(x) for x, y in pts if y is not None and math.isfinite(y)]
                ys = [float(y) for _, y in pts if y is not None and math.isfinite(y)]
                if xs:
                    ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)],
                            color=_color(summary, arm), linestyle=":", linewidth=1, label=arm)
                    mean = float(np.mean(ys))
                    ax.axhline(mean, color=_color(summary, arm), alpha=0.35, linewidth=1)
                flagged = [c for c in order if c.arm == arm and c.included and str(level) in c.levels
                           and c.levels[str(level)].client_bound]
                bound = [(c.index + 1, _cell_figure(c.levels[str(level)], row)) for c in flagged]
                bx = [float(x) for x, y in bound if y is not None and math.isfinite(y)]
                by = [float(y) for _, y in bound if y is not None and math.isfinite(y)]
                if bx:
                    ax.scatter(bx, by, s=110, facecolors="none", edgecolors="red", linewidths=1.4, zorder=5)
            excluded = [c.index + 1 for c in order if not c.included]
            for x in excluded:
                ax.axvline(x, color="red", alpha=0.3, linewidth=3)
            ax.set_title(f"{label} at c={level}", fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.tick_params(labelsize=7)
            if len(order) <= 24:
                ax.set_xticks(range(1, len(order) + 1))
            if row == 1:
                ax.set_xlabel("cell, in run order", fontsize=8)
            if col == 0 and ax.get_legend_handles_labels()[0]:
                ax.legend(loc="best", fontsize=6)
    fig.suptitle(f"{summary.experiment}: each cell's figures in run order (a trend within an arm is drift)\nfaint "
                 "line: the arm's mean; red ring: client-bound cell; red band: excluded cell", fontsize=9)
    _fit(fig, top_in=0.75, hspace=0.5)
    return _save(fig, path)
