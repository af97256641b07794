"""``report.md`` (verdicts first) and the CLI's verdict lines, drawn from a typed summary; nothing is recomputed
from records (what the design could detect is read back from each comparison's interval: ``kit.report.power``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kit.files.summary import Distribution, Summary
from kit.report.analysis import analysis_lines
from kit.report.batch import batch_table, queue_bound_section  # telemetry
from kit.report.plots import NOT_DRAWN
from kit.report.power import power_note, power_section, rules_out_text
from kit.report.text import confidence_pct, fmt, ratio_ci_text, ratio_text

# --------------------------------------------------------------------------- verdicts


def verdict_lines(summary: Summary) -> list[str]:
    """Short lines for the end of a run: one per tested level x metric, plus warnings."""
    a = summary.analysis
    lines = [f"verdicts vs {summary.baseline}: primary {a.primary}, {a.family_size} tests ({a.correction}, "
             f"family-wise {confidence_pct(summary)}); secondary metrics: {a.secondary_family_size} tests, "
             "their own correction (see docs/statistics.md)"]
    for c in summary.comparisons:
        if c.tested:
            role = "" if c.role == "primary" else " (secondary)"
            lines.append(f"  {c.arm} c={c.level:<4} {c.label:<12} {c.verdict}{role}")
            note = power_note(c, a)
            if note:
                lines.append(f"      {note}")
    for lv in summary.client_bound_levels():
        lines.append(f"  WARNING: c={lv.concurrency} is client-bound ({', '.join(lv.client_bound_cells)}): "
                     "the client, not the server, may have set those numbers")
    for f in summary.failed_cells:
        lines.append(f"  excluded: cell {f.id} ({f.status}: {f.reason or 'no reason given'})")
    return lines


def _verdict_table(summary: Summary) -> list[str]:
    base = summary.baseline
    rows = [f"| role | arm | concurrency | metric | {base} | arm | ratio arm/{base} [CI] | interval level | verdict |",
            "|---|---|---:|---|---:|---:|---|---:|---|"]
    for c in summary.comparisons:
        unit = f" {c.unit}" if c.unit else ""
        verdict = c.verdict
        if c.status == "significant" and c.role == "primary":
            verdict = f"**{verdict}**"
        elif c.status not in ("significant", "not_significant", "descriptive"):
            verdict = f"⚠ {verdict}"
        ruled = rules_out_text(c, level=False)
        if ruled:
            verdict += f" — {ruled}"
        level = "–" if c.interval_confidence is None else f"{100 * c.interval_confidence:.4g} %"
        rows.append(f"| {c.role} | {c.arm} | {c.level} | {c.label} | {fmt(c.baseline_value, unit)} | "
                    f"{fmt(c.arm_value, unit)} | {ratio_text(c.ratio)} {ratio_ci_text(c.ratio_ci)} | {level} | "
                    f"{verdict} |")
    if len(rows) == 2:
        rows.append(f"| – | – | – | – | – | – | – | – | nothing to compare with {base} |")
    return rows


# --------------------------------------------------------------------------- per level tables


def _triple(fig: Distribution) -> str:
    return " / ".join(fmt(v) for v in (fig.p50, fig.p90, fig.p99))


def _level_table(summary: Summary, level: int) -> list[str]:
    experts = any((f := summary.arm_level(arm, level)) is not None and f.server is not None for arm in summary.arms)
    head = ("| arm | cells | ok | errors | req/s | tok/s (cell CV) | TTFT ms p50/p90/p99 | TPOT ms p50/p90/p99 | "
            "ITL ms p50/p90/p99 | E2E ms p50/p90/p99 |")
    sep = "|---|---:|---:|---:|---:|---:|---|---|---|---|"
    if experts:
        head += " unique experts/step | step ms | decode batch |"
        sep += "---:|---:|---:|"
    rows = [head, sep]
    for arm in summary.arms:
        f = summary.arm_level(arm, level)
        if f is None:
            rows.append(f"| {arm} | 0 | – | – | – | – | – | – | – | – |" + (" – | – | – |" if experts else ""))
            continue
        cv = f.between_cells.throughput_tok_s.cv_pct
        tok = fmt(f.throughput_tok_s) + (f" ({cv:.1f} %)" if cv is not None else "")
        bound = " ⚠" if f.client_bound else ""
        notes = [f"{n} {what}" for n, what in ((f.short_responses, "short"), (f.usage_flagged, "usage flagged")) if n]
        ok = f"{f.ok} ({', '.join(notes)})" if notes else str(f.ok)
        row = (f"| {arm}{bound} | {f.cells} | {ok} | {f.errors} | {fmt(f.throughput_req_s)} | "
               f"{tok} | {_triple(f.ttft_ms)} | {_triple(f.tpot_ms)} | {_triple(f.itl_ms)} | "
               f"{_triple(f.e2e_ms)} |")
        if experts:
            s = f.server
            if s is None:
                row += " – | – | – |"
            else:
                row += f" {fmt(s.unique_experts_per_step)} | {fmt(s.step_ms)} | {fmt(s.decode_batch)} |"
        rows.append(row)
    short = sum(f.short_responses for arm in summary.arms if (f := summary.arm_level(arm, level)) is not None)
    if short:
        rows += ["", f"> {short} ok response(s) at this level returned fewer than the "
                     f"{summary.analysis.output_tokens_requested} output tokens asked for ('short'): their TPOT and "
                     "throughput cover less work. A comparison whose arms differ in that rate (Fisher's exact test) "
                     "gets no verdict."]
    flagged = sum(f.usage_flagged for arm in summary.arms if (f := summary.arm_level(arm, level)) is not None)
    if flagged:
        rows += ["", f"> **⚠ {flagged} ok response(s) at this level carried a usage count the server cannot have "
                     "meant** (not an integer in a plausible range, below the client's count of content events, or "
                     f"above the {summary.analysis.output_tokens_requested} output tokens asked): their timing uses "
                     "the client's count, and no comparison that involves their arm at this level gets a verdict "
                     "(usage_flagged)."]
    return rows


def _client_bound_section(summary: Summary) -> list[str]:
    bound = summary.client_bound_levels()
    if not bound:
        return []
    out = ["> **⚠ CLIENT-BOUND LEVELS: " + ", ".join(f"c={lv.concurrency}" for lv in bound)
           + ".** The load generator could not keep up there, so the client, not the server, may have set the "
             "numbers; those comparisons carry no clean verdict.", ""]
    reasons = _bound_reasons(summary)
    for lv in bound:
        for cid in lv.client_bound_cells:
            for r in reasons.get((cid, lv.concurrency), []):
                out.append(f"> - c={lv.concurrency} {cid}: {r}")
    return [*out, ""] if reasons else out


def _timing_section(summary: Summary) -> list[str]:
    rows = []
    for cell in summary.cells:
        for level, f in sorted(cell.levels.items(), key=lambda kv: int(kv[0])):
            rows += [f"> - c={level} {cell.id}: {w}" for w in f.timing_warnings]
    if not rows:
        return []
    return ["> **Timing warnings** (the client kept up, but its timestamps were sometimes late; p99 figures at "
            "these levels may read high, means are not biased):", *rows, ""]


def _bound_reasons(summary: Summary) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for cell in summary.cells:
        for level, f in cell.levels.items():
            if f.client_bound:
                out[(cell.id, int(level))] = list(f.client_bound_reasons or ["(no reason recorded)"])
    return out


def _failed_section(summary: Summary) -> list[str]:
    if not summary.failed_cells:
        return ["All cells completed; none was excluded."]
    out = ["These cells did not complete. Their records (if any) appear in summary.json under `cells` but are "
           "**excluded from every figure and comparison** above:", ""]
    for f in summary.failed_cells:
        out.append(f"- `{f.id}` ({f.status}): {f.reason or 'no reason given'}")
    return out


# --------------------------------------------------------------------------- design.sequential


def _sequential_section(summary: Summary) -> list[str]:
    """Why a sequential run stopped, and each primary comparison's decision and repeated interval at its last look."""
    q = summary.sequential
    if q is None:
        return []
    rows = ["| arm | concurrency | decision | p | boundary (nominal p) | information | repeated CI (level over the "
            "looks) |",
            "|---|---:|---|---:|---:|---:|---|"]
    for c in q.comparisons:
        at = f" at look {c.rejected_at_look}" if c.rejected_at_look else ""
        level = None if c.repeated_confidence is None else 100 * c.repeated_confidence
        rci = "unbounded at this look" if c.repeated_ci is None else (
            f"{_pct(c.repeated_ci[0])} to {_pct(c.repeated_ci[1])} ({fmt(level)} %)")
        rows.append(f"| {c.arm} | {c.level} | {c.decision}{at} | {fmt(c.p_value)} | {fmt(c.nominal_p)} | "
                    f"{fmt(None if c.fraction is None else 100 * c.fraction)} % | {rci} |")
    return ["## Sequential design", "",
            f"Stopped: {q.stopped}. {q.looks} of at most {q.most_looks} looks ({q.spending} alpha spending); "
            f"{q.cells_used} of {q.cells_planned} planned cells used, {q.cells_not_run} never needed.", "",
            "The primary intervals in this report are **repeated confidence intervals** (Jennison & Turnbull): each "
            "look's estimate ± its boundary's t quantile times the standard error, so that the intervals of all "
            "the looks cover the true ratio together at the level shown, wherever the run stopped. The usual "
            "fixed-sample interval, taken at a look the data chose, covers less often than it says; a repeated "
            "interval is wider, and excludes 1 exactly when the look's test crosses its boundary.", "",
            *rows, ""]


def _pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.1f} %".replace("-", "−")


def render_markdown(summary: Summary, plots: Sequence[str] | None = ()) -> str:
    """The report; ``plots``: the PNGs' paths under the bundle, or None where the run drew none (KIT_PLOTS=0)."""
    arms = [a for a in summary.arms if a != summary.baseline]
    title = f"# {summary.experiment}: {', '.join(arms)} vs {summary.baseline}"
    a = summary.analysis
    lines = [title, "", "## Verdicts", "", *_verdict_table(summary), "",
             f"Primary (confirmatory): {a.primary}, {a.family_size} tests (levels × arms), {a.correction}-corrected "
             f"so that all hold together at {confidence_pct(summary)}; secondary metrics ({', '.join(a.secondary)}) "
             f"are a separate family of {a.secondary_family_size} tests, never bold. Unique experts/step, when "
             "shown, is descriptive and not tested.", "", *_sequential_section(summary),
             *analysis_lines(summary),  # helper analysis: the test, the cell statistic, the SLO and goodput
             *_client_bound_section(summary), *_timing_section(summary),
             *queue_bound_section(summary),  # telemetry
             *power_section(summary)]
    lines += ["## Excluded cells", "", *_failed_section(summary), ""]
    for lv in summary.levels:
        flag = "  ⚠ CLIENT-BOUND: not a clean result" if lv.client_bound else ""
        lines += [f"## Concurrency {lv.concurrency}{flag}", "", *_level_table(summary, lv.concurrency), ""]
        lines += batch_table(summary, lv.concurrency)  # telemetry: what the server ran at this level
    if plots is None:
        lines += ["## Plots", "", NOT_DRAWN, ""]
    elif plots:
        lines += ["## Plots", "", *[f"![{Path(p).stem}]({p})" for p in plots], ""]
    lines += ["## Method", "", "Model, corrections and guardrails: `docs/statistics.md` in kit's repository (not in "
              "this bundle: kit_version in run.json names the release).", ""]
    return "\n".join(lines)
