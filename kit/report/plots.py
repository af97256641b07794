"""PNG plots of a typed summary: throughput, latency p50 and (with engine metrics) unique experts per step.

Deterministic: matplotlib's object API on the Agg canvas (no pyplot state), fixed size and dpi, and no
``Software`` tag in the PNG, so the same summary gives the same bytes. matplotlib is heavy and only needed
here, so it is imported when the first figure is made (``_figure``), not when kit starts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kit.files.summary import ArmLevel, Summary
from kit.report.text import confidence_pct

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PLOT_SIZE = (7.0, 4.2)
PLOT_DPI = 100
PNG_METADATA: dict[str, str | None] = {"Software": None}
LATENCY_PANELS = (("ttft_ms", "TTFT p50 (ms)"), ("tpot_ms", "TPOT p50 (ms)"), ("e2e_ms", "E2E p50 (ms)"))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

PLOTS_ENV = "KIT_PLOTS"  # "0" (or false / no / off): a run's report is written without its PNGs
NOT_DRAWN = (f"Not drawn: {PLOTS_ENV}=0 where this run finished. `kit report BUNDLE` draws them (and re-signs).")

Getter = Callable[[ArmLevel], tuple[float | None, Sequence[float | None] | None]]


def wanted() -> bool:
    """Whether a run draws its plots: yes unless KIT_PLOTS is 0 / false / no / off. For hosts that only collect
    bundles (a CI job, a batch of runs archived unread): about 1.1 s of CPU per run plus 0.13 s per cell on a
    2-core machine, the larger part of a small run's own CPU. ``kit report`` always draws."""
    return os.environ.get(PLOTS_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _figure(size: tuple[float, float]) -> Figure:
    from matplotlib.figure import Figure  # heavy optional module: only when plotting

    return Figure(figsize=size, dpi=PLOT_DPI)


def _fit(fig: Figure, *, top_in: float = 0.4, bottom_in: float = 0.55, right_in: float = 0.2,
         hspace: float = 0.45, wspace: float = 0.28) -> None:
    """Fixed margins in inches (as wide as the labels of these fixed-size figures need), set without drawing:
    ``tight_layout`` drew every figure once more to measure it, about three quarters of a report's plotting time
    (22 s against 4.9 s for a 4-cell bundle on a loaded 2-core machine)."""
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=0.75 / w, right=1 - right_in / w, bottom=bottom_in / h, top=1 - top_in / h,
                        hspace=hspace, wspace=wspace)


def _series(summary: Summary, arm: str, get: Getter) -> tuple[list[int], list[float], list[list[float]]]:
    """(levels, values, [lower errors, upper errors]) of one arm, skipping levels without a value."""
    xs: list[int] = []
    ys: list[float] = []
    err: list[list[float]] = [[], []]
    for lv in summary.levels:
        c = lv.concurrency
        f = summary.arm_level(arm, c)
        if f is None:
            continue
        value, ci = get(f)
        if value is None:
            continue
        xs.append(c)
        ys.append(float(value))
        err[0].append(max(0.0, value - ci[0]) if ci else 0.0)  # type: ignore[operator]  # None: as before, fails
        err[1].append(max(0.0, ci[1] - value) if ci else 0.0)  # type: ignore[operator]
    return xs, ys, err


def _style_axis(ax: Any, levels: Sequence[int], ylabel: str) -> None:
    ax.set_xscale("log")
    ax.set_xticks(list(levels))
    ax.set_xticklabels([str(c) for c in levels])
    ax.minorticks_off()
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def _draw(ax: Any, summary: Summary, get: Getter, ylabel: str) -> None:
    levels = [lv.concurrency for lv in summary.levels]
    arms = summary.arms
    for i, arm in enumerate(arms):
        xs, ys, err = _series(summary, arm, get)
        if not xs:
            continue
        shift = 1.0 + 0.04 * (i - (len(arms) - 1) / 2)  # side by side on the log axis
        ax.errorbar([x * shift for x in xs], ys, yerr=err, marker=MARKERS[i % len(MARKERS)], capsize=3,
                    label=arm, linewidth=1.5)
    for lv in summary.client_bound_levels():
        c = lv.concurrency
        ax.axvspan(c / 1.15, c * 1.15, color="red", alpha=0.12, linewidth=0)
    if levels:
        _style_axis(ax, levels, ylabel)
    ax.set_ylim(bottom=0)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)


def _save(fig: Figure, path: Path) -> Path:
    """Draw ``fig`` into ``path``. A figure matplotlib cannot draw (a server's metric of ±1.7e308 is finite, but
    the axis range between two of them is not: OverflowError in the tick formatter) is replaced by one that says
    so, so that one hostile number never costs the report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fig.savefig(path, format="png", dpi=PLOT_DPI, metadata=PNG_METADATA)
    except (OverflowError, ValueError, ArithmeticError) as e:
        note = _figure((PLOT_SIZE[0], 1.2))
        note.text(0.02, 0.5, f"{path.name}: not drawn ({type(e).__name__}: {str(e)[:120]}); the values are in "
                  "summary.json and the cells' files", fontsize=8, va="center")
        note.savefig(path, format="png", dpi=PLOT_DPI, metadata=PNG_METADATA)
    return path


def _title(summary: Summary, what: str) -> str:
    bound = " (red: client-bound)" if summary.client_bound_levels() else ""
    return f"{summary.experiment}: {what}{bound}"


def plot_throughput(summary: Summary, path: Path) -> Path:
    fig = _figure(PLOT_SIZE)
    ax = fig.add_subplot(1, 1, 1)
    _draw(ax, summary, lambda f: (f.throughput_tok_s, f.throughput_tok_s_ci), "output tokens/s")
    ax.set_title(_title(summary, f"throughput (mean of cells, {confidence_pct(summary)} CI across cells)"),
                 fontsize=10)
    _fit(fig)
    return _save(fig, path)


def plot_latency(summary: Summary, path: Path) -> Path:
    fig = _figure((PLOT_SIZE[0] * 1.8, PLOT_SIZE[1]))
    for i, (key, label) in enumerate(LATENCY_PANELS):
        ax = fig.add_subplot(1, len(LATENCY_PANELS), i + 1)
        _draw(ax, summary, lambda f, k=key: (f.latency(k).p50, f.latency(k).p50_ci), label)  # type: ignore[misc]
        ax.set_title(label.split(" (")[0], fontsize=10)
    fig.suptitle(_title(summary, f"latency p50 (pooled, {confidence_pct(summary)} CI across cells)"), fontsize=10)
    _fit(fig, top_in=0.65)
    return _save(fig, path)


def plot_experts(summary: Summary, path: Path) -> Path:
    fig = _figure(PLOT_SIZE)
    ax = fig.add_subplot(1, 1, 1)
    _draw(ax, summary, lambda f: (f.server.unique_experts_per_step if f.server else None, None),
          "distinct experts per step per layer")
    ax.set_title(_title(summary, "unique experts per decode step"), fontsize=10)
    _fit(fig)
    return _save(fig, path)


def has_experts(summary: Summary) -> bool:
    return any(a.server is not None and a.server.unique_experts_per_step is not None for a in summary.arm_levels)


def render_plots(root: Path, summary: Summary) -> list[Path]:
    plots = root / "plots"
    out = [plot_throughput(summary, plots / "throughput.png"), plot_latency(summary, plots / "latency.png")]
    if has_experts(summary):
        out.append(plot_experts(summary, plots / "experts.png"))
    return out
