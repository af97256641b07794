"""Per-cell time series from the telemetry (``telemetry.jsonl``): the server's output tokens/s (its own token
counter between samples), the requests it ran and queued against the level's concurrency, and, with GPUs, their
utilisation and power; beside them the client's side from ``records.jsonl`` (tokens/s in 1 s bins, requests in
flight at each sample), aligned through ``telemetry.json``'s ``started_unix`` (a server without /metrics, such as
transformers serve, still gets a tokens/s and a requests line). The cell's levels are laid end to end in the order
they ran (the gaps between them left out), each marked with its concurrency. One PNG per cell with telemetry:
``plots/cells/<cell>.png``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kit.errors import BundleError
from kit.files.read import read_file
from kit.files.summary import Cell, Summary
from kit.files.telemetry import TelemetryFile, TelemetrySample
from kit.report.plots import PLOT_SIZE, _figure, _fit, _save
from kit.stats.bundle import read_records
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
    client_tok: list[tuple[float, float]] = field(default_factory=list)  # from records.jsonl, 1 s bins
    in_flight: list[tuple[float, float]] = field(default_factory=list)  # requests the client had open


def _client(out: _Series, records: Iterable[Mapping[str, object]], unix0: float, start: float,
            times: list[float], extent: float) -> None:
    """The client's side from the level's records: tokens/s in 1 s bins and the requests open at each sample
    time (``wall_start`` is time.time(), the clock of the sampler's ``started_unix``)."""
    spans: list[tuple[float, float]] = []
    chunks: list[float] = []
    for r in records:
        ws, e2e, ch = r.get("wall_start"), r.get("e2e_ns"), r.get("chunk_ns")
        if not isinstance(ws, (int, float)) or not isinstance(e2e, int):
            continue
        t = float(ws) - unix0
        spans.append((t, t + e2e / 1e9))
        if isinstance(ch, list):
            chunks += [t + c / 1e9 for c in ch if isinstance(c, int)]
    if not spans:
        return
    bins = max(1, math.floor(extent))  # whole seconds of the level (a last partial second would read low)
    counts, _ = np.histogram(np.asarray(chunks, dtype=float), bins=bins, range=(0.0, float(bins)))
    out.client_tok += [(start + b + 0.5, float(n)) for b, n in enumerate(counts.tolist())]
    starts = np.sort(np.asarray([a for a, _ in spans]))
    ends = np.sort(np.asarray([e for _, e in spans]))
    for t in times:  # open at t: started at or before t, not yet ended
        n = int(np.searchsorted(starts, t, side="right")) - int(np.searchsorted(ends, t, side="right"))
        out.in_flight.append((start + t, float(n)))


def _add_level(out: _Series, samples: list[TelemetrySample], start: float, level: int, extent: float) -> float:
    """The level's samples from ``start`` on, ``extent`` seconds long; returns where the next level starts."""
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
    end = start + extent
    out.bounds.append((start, end, level))
    for points in (out.tok, out.running, out.queued, out.util, out.power, out.client_tok, out.in_flight):
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
        if not samples:
            continue
        d = root / "cells" / cell.id / f"level-{level}"
        info = _info(d)
        extent = max(samples[-1].t_s + 0.5, info.wall_s if info else 0.0)
        stream = read_records(d / "records.jsonl") if info and info.started_unix is not None else None
        if stream is not None and info is not None and info.started_unix is not None:
            try:
                _client(out, stream, info.started_unix, start, [s.t_s for s in samples], extent)
            except BundleError:
                pass
        start = _add_level(out, samples, start, int(level), extent)
    return out if out.bounds else None


def _info(d: Path) -> TelemetryFile | None:
    try:
        return read_file(d, "telemetry.json", TelemetryFile)
    except BundleError:
        return None


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
        ax.plot(*_xy(series.tok), color="tab:blue", linewidth=1.2, marker=".", markersize=3, label="server")
    if series.client_tok:
        ax.plot(*_xy(series.client_tok), color="tab:cyan", linewidth=1.0, linestyle="--", marker=".", markersize=3,
                label="client (records)")
    if not series.tok and not series.client_tok:
        ax.text(0.5, 0.5, "no token counter and no records", transform=ax.transAxes, ha="center", fontsize=8)
    elif not series.tok:
        ax.text(0.01, 0.95, "the server exposes no token counter", transform=ax.transAxes, va="top", fontsize=7)
    ax.set_ylabel("output tok/s", fontsize=8)
    ax.set_ylim(bottom=0)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=6, ncol=2)
    ax = axes[1]
    _mark_levels(ax, series, label=False)
    for start, end, level in series.bounds:
        ax.hlines(level, start, end, colors="0.4", linestyles="dotted", linewidth=1,
                  label="concurrency" if start == series.bounds[0][0] else "_nolegend_")
    if series.running:
        ax.plot(*_xy(series.running), color="tab:green", linewidth=1.2, marker=".", markersize=3, label="running")
    if series.queued:
        ax.plot(*_xy(series.queued), color="tab:red", linewidth=1.0, linestyle="--", marker=".", markersize=3,
                label="queued")
    if series.in_flight:
        ax.plot(*_xy(series.in_flight), color="tab:olive", linewidth=1.0, linestyle="-.", marker="x", markersize=3,
                label="in flight (client)")
    ax.set_ylabel("requests", fontsize=8)
    ax.set_ylim(bottom=0)
    ax.legend(loc="upper left", fontsize=6, ncol=4)
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
    _fit(fig, top_in=0.55, right_in=0.6 if series.power else 0.2, hspace=0.3)
    return _save(fig, path)


def render_cell_plots(root: Path, summary: Summary) -> list[Path]:
    out = []
    for cell in sorted(summary.cells, key=lambda c: c.index):
        got = plot_cell(root, summary, cell, root / "plots" / "cells" / f"{cell.id}.png")
        if got is not None:
            out.append(got)
    return out
