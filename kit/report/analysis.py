"""report.md's lines on the pre-registered analysis (test, cell statistic, SLO) and the goodput table; nothing for a
summary older than schema 5 (they had neither)."""

from __future__ import annotations

from kit.files.summary import Summary

_TEST = {"welch": "Welch's t on the log cell statistics",
         "blocked": "the blocked test: a paired t on the per-block differences of the log cell statistics"}
_STAT = {"mean": "mean", "geomean": "geometric mean", "trimmed": "trimmed mean", "p50": "p50 (median)", "p90": "p90",
         "p99": "p99"}


def analysis_lines(summary: Summary) -> list[str]:
    a = summary.analysis
    if a.comparison_method is None or a.cell_statistic is None:
        return []
    stat = _STAT.get(a.cell_statistic, a.cell_statistic)
    if a.cell_statistic == "trimmed" and a.cell_statistic_trim is not None:
        stat += f", {100 * a.cell_statistic_trim:g} % cut from each tail"
    out = [f"Analysis (pre-registered): {_TEST.get(a.comparison_method, a.comparison_method)}; cell statistic of "
           f"every latency: {stat} (docs/statistics.md).", ""]
    if a.slo is None:
        return out
    bounds = ", ".join(f"{k.removesuffix('_ms').upper()} ≤ {v:g} ms" for k, v in a.slo.items() if v is not None)
    out += [f"SLO: {bounds}. A request is good when it succeeded and met every bound; goodput = good requests per "
            "second of the level's wall time, SLO attainment = good / all requests (vLLM's --goodput; "
            "DistServe's goodput is another figure, the highest rate meeting an attainment target).", "",
            "| arm | concurrency | cells | good / requests | goodput req/s (pooled) | SLO attainment |",
            "|---|---:|---:|---:|---:|---:|"]
    rows: dict[tuple[str, int], list[tuple[int, int, float | None]]] = {}
    for g in summary.goodput or []:
        rows.setdefault((g.arm, g.level), []).append((g.good, g.requests, g.wall_s))
    for (arm, level), cells in sorted(rows.items(), key=lambda x: (x[0][1], x[0][0])):
        good, total = sum(c[0] for c in cells), sum(c[1] for c in cells)
        walls = [c[2] for c in cells]
        rate = f"{good / sum(w for w in walls if w):.3g}" if all(walls) else "—"
        share = f"{100 * good / total:.1f} %" if total else "—"
        out.append(f"| {arm} | {level} | {len(cells)} | {good} / {total} | {rate} | {share} |")
    return [*out, ""]
