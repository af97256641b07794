"""Per-cell time series from the telemetry (``telemetry.jsonl``): the server's output tokens/s (its own token
counter between samples), the requests it ran and queued against the level's concurrency, and, with GPUs, their
utilisation and power. The cell's levels are laid end to end in the order they ran (the gaps between them left
out), each marked with its concurrency. One PNG per cell with telemetry: ``plots/cells/<cell>.png``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.errors import BundleError
from kit.files.summary import Cell, Summary
from kit.files.telemetry import TelemetrySample
from kit.report.plots import PLOT_SIZE, _figure, _save
from kit.stats.telemetry import read_samples

GAP_S = 0.5  # blank time drawn between two levels


@dataclass
class _Series:
    bounds: list[tuple[float, float, int]] = field(default_factory=list)  # (start, end, concurrency) per level
    tok: list[tuple[float, float]] = field(default_factory=list)
    running: list[tuple[float, float]] = field(default_factory=list)
    queued: list[tuple[float, float]] = field(default_factory=list)
    util: list[tuple[float, float]] = field(default_factory=list)
    power: list[tuple[float, float]] = field(default_factory=list)


def _add_level(out: _Series, samples: list[TelemetrySample], start: float, level: int) -> float:
    prev: tuple[float, float] | None = None
    for s in samples:
        t = start + s.t_s
        if s.server is not None:
            if s.server.running is not None:
                out.running.append((t, s.server.running))
            if s.server.queued is not None:
                out.queued.append((t, s.server.queued))
            gen = s.server.generated_tokens
            if gen is not None:
                if prev is not None and t > prev[0]:
                    out.tok.append(((t + prev[0]) / 2, (gen - prev[1]) / (t - prev[0])))
                prev = (t, gen)
        if s.gpus:
            utils = [g.util_pct for g in s.gpus if g.util_pct is not None]
            watts = [g.power_w for g in s.gpus if g.power_w is not None]
            if utils:
                out.util.append((t, sum(utils) / len(utils)))
            if watts:
                out.power.append((t, sum(watts)))
    end = start + (samples[-1].t_s if samples else 0.0) + 0.5
    out.bounds.append((start, end, level))
    for points in (out.tok, out.running, out.queued, out.util, out.power):
        if points:
            points.append((end, math.nan))  # no line from one level into the next
    return end + GAP_S


def cell_series(root: Path, cell: Cell) -> _Series | None:
    out = _Series()
    start = 0.0
    for level in sorted(cell.levels, key=int):
        try:
            samples = list(read_samples(root / "cells" / cell.id / f"level-{level}" / "telemetry.jsonl"))
        except BundleError:
            samples = []
        if samples:
            start = _add_level(out, samples, start, int(level))
    return out if out.bounds else None


def _xy(points: list[tuple[float, float]]) -> tuple[list[float], list[float]]:
    return [p[0] for p in points], [p[1] for p in points]


def _mark_levels(ax: Any, series: _Series, label: bool) -> None:
    for start, end, level in series.bounds:
        ax.axvspan(start, end, color="0.92", linewidth=0, zorder=0)
        if label:
            ax.text((start + end) / 2, 1.0, f"c={level}", transform=ax.get_xaxis_transform(), ha="center",
                    va="bottom", fontsize=7)


def plot_cell(root: Path, summary: Summary, cell: Cell, path: Path) -> Path | None:
    series = cell_series(root, cell)
    if series is None:
        return None
    gpu = bool(series.util or series.power)
    panels = 3 if gpu else 2
    fig = _figure((PLOT_SIZE[0] * 1.3, PLOT_SIZE[1] * (1.1 if gpu else 0.85)))
    axes = [fig.add_subplot(panels, 1, i + 1) for i in range(panels)]
    ax = axes[0]
    _mark_levels(ax, series, label=True)
    if series.tok:
        ax.plot(*_xy(series.tok), color="tab:blue", linewidth=1.2, marker=".", markersize=3)
    else:
        ax.text(0.5, 0.5, "the server exposes no token counter", transform=ax.transAxes, ha="center", fontsize=8)
    ax.set_ylabel("server tok/s", fontsize=8)
    ax = axes[1]
    _mark_levels(ax, series, label=False)
    for start, end, level in series.bounds:
        ax.hlines(level, start, end, colors="0.4", linestyles="dotted", linewidth=1,
                  label="concurrency" if start == series.bounds[0][0] else "_nolegend_")
    if series.running:
        ax.plot(*_xy(series.running), color="tab:green", linewidth=1.2, marker=".", markersize=3, label="running")
    if series.queued:
        ax.plot(*_xy(series.queued), color="tab:red", linewidth=1.0, linestyle="--", label="queued")
    ax.set_ylabel("requests", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=6, ncol=3)
    if gpu:
        ax = axes[2]
        _mark_levels(ax, series, label=False)
        if series.util:
            ax.plot(*_xy(series.util), color="tab:purple", linewidth=1.2, label="GPU util % (mean)")
        ax.set_ylabel("util %", fontsize=8)
        ax.set_ylim(0, 105)
        if series.power:
            ax2 = ax.twinx()
            ax2.plot(*_xy(series.power), color="tab:orange", linewidth=1.0, label="power W (sum)")
            ax2.set_ylabel("W", fontsize=8)
            ax2.set_ylim(bottom=0)
            ax2.tick_params(labelsize=7)
            ax2.legend(loc="upper right", fontsize=6)
        ax.legend(loc="upper left", fontsize=6)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("seconds of level time (levels end to end, in the order they ran)", fontsize=8)
    fig.suptitle(f"{summary.experiment}: cell {cell.id} ({'included' if cell.included else 'excluded'}), "
                 "telemetry about once a second", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def render_cell_plots(root: Path, summary: Summary) -> list[Path]:
    out = []
    for cell in sorted(summary.cells, key=lambda c: c.index):
        got = plot_cell(root, summary, cell, root / "plots" / "cells" / f"{cell.id}.png")
        if got is not None:
            out.append(got)
    return out
