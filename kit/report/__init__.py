"""The human side of a summary: ``report.md`` (verdicts first), PNG plots, and the CLI's verdict lines.

Everything is drawn from a typed summary (``kit.files.summary.Summary``, what ``kit.stats`` computes); nothing
is recomputed here. ``render`` writes the markdown and verdict lines, ``plots`` the PNGs (matplotlib, loaded
only when plotting), ``rebuild`` is ``kit report BUNDLE`` (recompute, re-render, re-sign).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from kit.files.summary import Summary
from kit.plumbing.redact import redact
from kit.report import plots, render
from kit.report.expert_pass import arm_passes, expert_pass_section
from kit.report.overhead import cell_overheads, overhead_section
from kit.report.plots_decide import plot_cdfs, plot_drift, plot_pareto
from kit.report.plots_series import render_cell_plots
from kit.report.quality import cell_quality, quality_section
from kit.report.render import render_markdown
from kit.report.workload import connection_section, workload_section

__all__ = ["as_summary", "render_markdown", "render_report", "verdict_lines"]


def as_summary(summary: Summary | Mapping[str, object]) -> Summary:
    """The typed summary of a summary.json document (a Summary is returned as it is)."""
    return summary if isinstance(summary, Summary) else Summary.model_validate(summary)


def verdict_lines(summary: Summary | Mapping[str, object]) -> list[str]:
    """Short lines for the end of a run: one per tested level x metric, plus warnings."""
    return render.verdict_lines(as_summary(summary))


def render_report(root: Path, summary: Summary | Mapping[str, object], *, draw: bool = True) -> list[Path]:
    """Write report.md and (``draw``) plots/*.png under the bundle root; return the paths written."""
    root = Path(root)
    typed = as_summary(summary)
    written: list[Path] = []
    if draw:
        written = plots.render_plots(root, typed)
        # the plots people decide from, and each cell's telemetry over time (kit.report.plots_decide, plots_series)
        shown = root / "plots"
        written += [plot_pareto(typed, shown / "pareto.png"), plot_cdfs(root, typed, shown / "latency_cdf.png"),
                    plot_drift(typed, shown / "drift.png"), *render_cell_plots(root, typed)]
    md = root / "report.md"
    text = render_markdown(typed, [p.relative_to(root).as_posix() for p in written] if draw else None)
    text += "\n".join(quality_section(cell_quality(root, typed)))  # helper sglang: the untimed quality check
    text += "\n".join(expert_pass_section(arm_passes(root, typed)))  # manifest expert_pass (kit.report.expert_pass)
    # https and the workload: kit.report.workload
    tail = [*connection_section(root), *workload_section(root), *overhead_section(cell_overheads(root, typed))]
    md.write_text(redact(text + "\n".join(tail)), encoding="utf-8")  # drawn from masked files; a last look
    return [md, *written]
