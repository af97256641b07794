"""The human side of a summary: ``report.md`` (verdicts first), PNG plots, and the CLI's verdict lines.

Everything is drawn from the summary that ``kit.stats.summarize_bundle`` returns; nothing is recomputed here.
Plots are deterministic: matplotlib's object API on the Agg canvas (no pyplot state), fixed size and dpi, and
no ``Software`` tag in the PNG, so the same summary gives the same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

PLOT_SIZE = (7.0, 4.2)
PLOT_DPI = 100
PNG_METADATA: dict[str, Any] = {"Software": None}
LATENCY_PANELS = (("ttft_ms", "TTFT p50 (ms)"), ("tpot_ms", "TPOT p50 (ms)"), ("e2e_ms", "E2E p50 (ms)"))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


# --------------------------------------------------------------------------- formatting


def _fmt(x: Any, unit: str = "") -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x}{unit}"
    v = float(x)
    a = abs(v)
    text = f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 1 else f"{v:.3g}"
    return text.replace("-", "−") + unit


def _ratio(x: float | None) -> str:
    if x is None:
        return "–"
    return "≥1000" if x >= 1000 else f"{x:.3g}" if x >= 10 else f"{x:.3f}"


def _ratio_ci(ci: Sequence[float] | None) -> str:
    return "(not tested)" if not ci else f"[{_ratio(ci[0])}, {_ratio(ci[1])}]"


def _level_index(summary: Mapping[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(a["arm"], int(a["level"])): a for a in summary.get("arm_levels", [])}


def _bound_levels(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [lv for lv in summary.get("levels", []) if lv.get("client_bound")]


def _adjusted_pct(summary: Mapping[str, Any]) -> str:
    a = summary.get("analysis", {})
    adj = a.get("adjusted_confidence")
    return "–" if adj is None else f"{100 * adj:.4g} %"


# --------------------------------------------------------------------------- verdicts


def verdict_lines(summary: Mapping[str, Any]) -> list[str]:
    """Short lines for the end of a run: one per tested level x metric, plus warnings."""
    a = summary.get("analysis", {})
    lines = [f"verdicts vs {summary.get('baseline')}: {a.get('family_size', 0)} tests, each interval at "
             f"{_adjusted_pct(summary)} (Bonferroni over all levels and metrics)"]
    for c in summary.get("comparisons", []):
        if c.get("tested"):
            lines.append(f"  {c['arm']} c={c['level']:<4} {c['label']:<12} {c['verdict']}")
    for lv in _bound_levels(summary):
        lines.append(f"  WARNING: c={lv['concurrency']} is client-bound ({', '.join(lv['client_bound_cells'])}): "
                     "the client, not the server, may have set those numbers")
    for f in summary.get("failed_cells", []):
        lines.append(f"  excluded: cell {f['id']} ({f['status']}: {f.get('reason') or 'no reason given'})")
    return lines


def _verdict_table(summary: Mapping[str, Any]) -> list[str]:
    base = summary.get("baseline", "baseline")
    conf = _adjusted_pct(summary)
    rows = [f"| arm | concurrency | metric | {base} | arm | ratio arm/{base} [{conf} CI] | verdict |",
            "|---|---:|---|---:|---:|---|---|"]
    for c in summary.get("comparisons", []):
        unit = f" {c['unit']}" if c.get("unit") else ""
        verdict = c["verdict"]
        if c.get("status") == "significant":
            verdict = f"**{verdict}**"
        elif c.get("status") == "client_bound":
            verdict = f"⚠ {verdict}"
        rows.append(f"| {c['arm']} | {c['level']} | {c['label']} | {_fmt(c['baseline_value'], unit)} | "
                    f"{_fmt(c['arm_value'], unit)} | {_ratio(c['ratio'])} {_ratio_ci(c.get('ratio_ci'))} | {verdict} |")
    if len(rows) == 2:
        rows.append(f"| – | – | – | – | – | – | nothing to compare with {base} |")
    return rows


# --------------------------------------------------------------------------- per level tables


def _triple(fig: Mapping[str, Any] | None) -> str:
    if not fig:
        return "–"
    return " / ".join(_fmt(fig.get(k)) for k in ("p50", "p90", "p99"))


def _level_table(summary: Mapping[str, Any], level: int) -> list[str]:
    index = _level_index(summary)
    experts = any((index.get((arm, level)) or {}).get("server") for arm in summary.get("arms", []))
    head = ("| arm | cells | ok | errors | req/s | tok/s (cell CV) | TTFT ms p50/p90/p99 | TPOT ms p50/p90/p99 | "
            "ITL ms p50/p90/p99 | E2E ms p50/p90/p99 |")
    sep = "|---|---:|---:|---:|---:|---:|---|---|---|---|"
    if experts:
        head += " unique experts/step | step ms | decode batch |"
        sep += "---:|---:|---:|"
    rows = [head, sep]
    for arm in summary.get("arms", []):
        f = index.get((arm, level))
        if f is None:
            rows.append(f"| {arm} | 0 | – | – | – | – | – | – | – | – |" + (" – | – | – |" if experts else ""))
            continue
        cv = f.get("between_cells", {}).get("throughput_tok_s", {}).get("cv_pct")
        tok = _fmt(f.get("throughput_tok_s")) + (f" ({cv:.1f} %)" if cv is not None else "")
        bound = " ⚠" if f.get("client_bound") else ""
        row = (f"| {arm}{bound} | {f['cells']} | {f['ok']} | {f['errors']} | {_fmt(f.get('throughput_req_s'))} | "
               f"{tok} | {_triple(f.get('ttft_ms'))} | {_triple(f.get('tpot_ms'))} | {_triple(f.get('itl_ms'))} | "
               f"{_triple(f.get('e2e_ms'))} |")
        if experts:
            s = f.get("server") or {}
            row += f" {_fmt(s.get('unique_experts_per_step'))} | {_fmt(s.get('step_ms'))} | " \
                   f"{_fmt(s.get('decode_batch'))} |"
        rows.append(row)
    return rows


def _client_bound_section(summary: Mapping[str, Any]) -> list[str]:
    bound = _bound_levels(summary)
    if not bound:
        return []
    out = ["> **⚠ CLIENT-BOUND LEVELS: " + ", ".join(f"c={lv['concurrency']}" for lv in bound)
           + ".** The load generator could not keep up there, so the client, not the server, may have set the "
             "numbers; those comparisons carry no clean verdict.", ""]
    reasons = _bound_reasons(summary)
    for lv in bound:
        for cid in lv["client_bound_cells"]:
            for r in reasons.get((cid, int(lv["concurrency"])), []):
                out.append(f"> - c={lv['concurrency']} {cid}: {r}")
    return [*out, ""] if reasons else out


def _timing_section(summary: Mapping[str, Any]) -> list[str]:
    rows = []
    for cell in summary.get("cells", []):
        for level, f in sorted((cell.get("levels") or {}).items(), key=lambda kv: int(kv[0])):
            rows += [f"> - c={level} {cell['id']}: {w}" for w in f.get("timing_warnings") or []]
    if not rows:
        return []
    return ["> **Timing warnings** (the client kept up, but its timestamps were sometimes late; p99 figures at "
            "these levels may read high, means are not biased):", *rows, ""]


def _bound_reasons(summary: Mapping[str, Any]) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for cell in summary.get("cells", []):
        for level, f in (cell.get("levels") or {}).items():
            if f.get("client_bound"):
                out[(cell["id"], int(level))] = list(f.get("client_bound_reasons") or ["(no reason recorded)"])
    return out


def _failed_section(summary: Mapping[str, Any]) -> list[str]:
    failed = summary.get("failed_cells", [])
    if not failed:
        return ["All cells completed; none was excluded."]
    out = ["These cells did not complete. Their records (if any) appear in summary.json under `cells` but are "
           "**excluded from every figure and comparison** above:", ""]
    for f in failed:
        out.append(f"- `{f['id']}` ({f['status']}): {f.get('reason') or 'no reason given'}")
    return out


def _method_section(summary: Mapping[str, Any]) -> list[str]:
    a = summary.get("analysis", {})
    conf = a.get("confidence", 0.95)
    return [
        f"Each interval comes from {a.get('resamples')} replicates of a two-stage bootstrap that draws an arm's "
        "repeats (cells) with replacement and then the requests within each drawn cell (throughput: the mean of "
        "the drawn cells' throughputs), with arms resampled independently and the generator seeded from the "
        "manifest; the replicates are rescaled to the between-repeat variance and the percentile interval is "
        "widened by Student's t with K_a + K_b − 2 degrees of freedom, because a few repeats cannot pin down "
        "their own spread.",
        f"To keep the chance of any false alarm across all {a.get('family_size')} tested levels × metrics "
        f"at {100 * (1 - conf):.0f} % (Bonferroni), each interval is a {_adjusted_pct(summary)} interval, and a "
        "difference is called only when the interval of the ratio arm/baseline excludes 1; percentages are "
        "changes of the metric itself, and 'faster' means lower latency or higher throughput.",
    ]


def render_markdown(summary: Mapping[str, Any], plots: Sequence[str] = ()) -> str:
    arms = [a for a in summary.get("arms", []) if a != summary.get("baseline")]
    title = f"# {summary.get('experiment', 'experiment')}: {', '.join(arms)} vs {summary.get('baseline')}"
    a = summary.get("analysis", {})
    lines = [title, "", "## Verdicts", "", *_verdict_table(summary), "",
             f"{a.get('family_size', 0)} tests (arms × levels × metrics); each interval at {_adjusted_pct(summary)} "
             f"so that all hold together at {100 * a.get('confidence', 0.95):.0f} %. Unique experts/step, when "
             "shown, is descriptive and not tested.", "", *_client_bound_section(summary), *_timing_section(summary)]
    lines += ["## Excluded cells", "", *_failed_section(summary), ""]
    for lv in summary.get("levels", []):
        c = int(lv["concurrency"])
        flag = "  ⚠ CLIENT-BOUND: not a clean result" if lv.get("client_bound") else ""
        lines += [f"## Concurrency {c}{flag}", "", *_level_table(summary, c), ""]
    if plots:
        lines += ["## Plots", "", *[f"![{Path(p).stem}]({p})" for p in plots], ""]
    lines += ["## How the intervals were computed", "", " ".join(_method_section(summary)), ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- plots


def _series(summary: Mapping[str, Any], arm: str, get: Any) -> tuple[list[int], list[float], list[list[float]]]:
    """(levels, values, [lower errors, upper errors]) of one arm, skipping levels without a value."""
    index = _level_index(summary)
    xs: list[int] = []
    ys: list[float] = []
    err: list[list[float]] = [[], []]
    for lv in summary.get("levels", []):
        c = int(lv["concurrency"])
        f = index.get((arm, c))
        if f is None:
            continue
        value, ci = get(f)
        if value is None:
            continue
        xs.append(c)
        ys.append(float(value))
        err[0].append(max(0.0, value - ci[0]) if ci else 0.0)
        err[1].append(max(0.0, ci[1] - value) if ci else 0.0)
    return xs, ys, err


def _style_axis(ax: Any, levels: Sequence[int], ylabel: str) -> None:
    ax.set_xscale("log")
    ax.set_xticks(list(levels))
    ax.set_xticklabels([str(c) for c in levels])
    ax.minorticks_off()
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def _draw(ax: Any, summary: Mapping[str, Any], get: Any, ylabel: str) -> None:
    levels = [int(lv["concurrency"]) for lv in summary.get("levels", [])]
    arms = summary.get("arms", [])
    for i, arm in enumerate(arms):
        xs, ys, err = _series(summary, arm, get)
        if not xs:
            continue
        shift = 1.0 + 0.04 * (i - (len(arms) - 1) / 2)  # side by side on the log axis
        ax.errorbar([x * shift for x in xs], ys, yerr=err, marker=MARKERS[i % len(MARKERS)], capsize=3,
                    label=arm, linewidth=1.5)
    bound = [int(lv["concurrency"]) for lv in summary.get("levels", []) if lv.get("client_bound")]
    for c in bound:
        ax.axvspan(c / 1.15, c * 1.15, color="red", alpha=0.12, linewidth=0)
    if levels:
        _style_axis(ax, levels, ylabel)
    ax.set_ylim(bottom=0)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=PLOT_DPI, metadata=PNG_METADATA)
    return path


def _conf(summary: Mapping[str, Any]) -> str:
    return f"{100 * summary.get('analysis', {}).get('confidence', 0.95):.0f} %"


def _title(summary: Mapping[str, Any], what: str) -> str:
    bound = " (red: client-bound)" if _bound_levels(summary) else ""
    return f"{summary.get('experiment', '')}: {what}{bound}"


def plot_throughput(summary: Mapping[str, Any], path: Path) -> Path:
    fig = Figure(figsize=PLOT_SIZE, dpi=PLOT_DPI)
    ax = fig.add_subplot(1, 1, 1)
    _draw(ax, summary, lambda f: (f.get("throughput_tok_s"), f.get("throughput_tok_s_ci")), "output tokens/s")
    ax.set_title(_title(summary, f"throughput (mean of cells, {_conf(summary)} CI across cells)"), fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_latency(summary: Mapping[str, Any], path: Path) -> Path:
    fig = Figure(figsize=(PLOT_SIZE[0] * 1.8, PLOT_SIZE[1]), dpi=PLOT_DPI)
    for i, (key, label) in enumerate(LATENCY_PANELS):
        ax = fig.add_subplot(1, len(LATENCY_PANELS), i + 1)
        _draw(ax, summary, lambda f, k=key: ((f.get(k) or {}).get("p50"), (f.get(k) or {}).get("p50_ci")), label)
        ax.set_title(label.split(" (")[0], fontsize=10)
    fig.suptitle(_title(summary, f"latency p50 (pooled, {_conf(summary)} CI across cells)"), fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def plot_experts(summary: Mapping[str, Any], path: Path) -> Path:
    fig = Figure(figsize=PLOT_SIZE, dpi=PLOT_DPI)
    ax = fig.add_subplot(1, 1, 1)
    _draw(ax, summary, lambda f: ((f.get("server") or {}).get("unique_experts_per_step"), None),
          "distinct experts per step per layer")
    ax.set_title(_title(summary, "unique experts per decode step"), fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def _has_experts(summary: Mapping[str, Any]) -> bool:
    return any((a.get("server") or {}).get("unique_experts_per_step") is not None
               for a in summary.get("arm_levels", []))


def render_plots(root: Path, summary: Mapping[str, Any]) -> list[Path]:
    plots = root / "plots"
    out = [plot_throughput(summary, plots / "throughput.png"), plot_latency(summary, plots / "latency.png")]
    if _has_experts(summary):
        out.append(plot_experts(summary, plots / "experts.png"))
    return out


def render_report(root: Path, summary: Mapping[str, Any]) -> list[Path]:
    """Write report.md and plots/*.png under the bundle root; return the paths written."""
    root = Path(root)
    plots = render_plots(root, summary)
    md = root / "report.md"
    md.write_text(render_markdown(summary, [p.relative_to(root).as_posix() for p in plots]), encoding="utf-8")
    return [md, *plots]
