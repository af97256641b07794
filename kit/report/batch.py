"""The report's account of what the server really ran, per level: the decode batch it reached (running requests
over the telemetry samples, median and max), its queue, whether the level was queue-bound, and the GPUs' state.
Descriptive, drawn from ``cells[].levels[c].telemetry`` of the summary (``kit.stats.telemetry``); never tested."""

from __future__ import annotations

from kit.files.summary import Summary
from kit.files.telemetry import LevelTelemetry
from kit.report.text import fmt


def _cells(summary: Summary, level: int) -> list[tuple[str, LevelTelemetry]]:
    out = []
    for cell in summary.cells:
        f = cell.levels.get(str(level))
        if f is not None and f.telemetry is not None:
            out.append((cell.id, f.telemetry))
    return out


def _n(v: float | None) -> str:
    return "–" if v is None else f"{v:g}"


def _pair(a: float | None, b: float | None) -> str:
    return "–" if a is None and b is None else f"{_n(a)} / {_n(b)}"


def _gpu(t: LevelTelemetry) -> str:
    parts = [f"{t.sm_clock_mhz_median:g} MHz" if t.sm_clock_mhz_median is not None else None,
             f"{fmt(t.power_w_median)} W" if t.power_w_median is not None else None,
             f"{t.util_pct_median:g} %" if t.util_pct_median is not None else None]
    shown = [p for p in parts if p]
    return ", ".join(shown) if shown else "–"


def _bound(t: LevelTelemetry) -> str:
    note = f"; {t.batch_note}" if t.batch_note else ""
    if t.queue_bound is None:
        return (f"? ({t.queue_bound_reason})" if t.queue_bound_reason else "?") + note
    return (f"**yes**: {t.queue_bound_reason}" if t.queue_bound else "no") + note


def batch_table(summary: Summary, level: int) -> list[str]:
    """The level's table of what the server ran, one row per cell with telemetry (nothing without any)."""
    cells = _cells(summary, level)
    if not cells:
        return []
    rows = [f"What the server ran at c={level} (telemetry, about one sample a second; descriptive, not tested):", "",
            "| cell | samples | running median / max | queued median / max | KV cache max | server tok/s | "
            "GPUs: SM clock, power, util (medians) | queue-bound |",
            "|---|---:|---:|---:|---:|---:|---|---|"]
    for cid, t in cells:
        kv = "–" if t.kv_cache_usage_max is None else f"{100 * t.kv_cache_usage_max:.0f} %"
        rows.append(f"| {cid} | {t.samples} | {_pair(t.running_median, t.running_max)} | "
                    f"{_pair(t.queued_median, t.queued_max)} | {kv} | {fmt(t.server_tok_s)} | {_gpu(t)} | "
                    f"{_bound(t)} |")
    return [*rows, ""]


def queue_bound_section(summary: Summary) -> list[str]:
    """A warning above the levels naming every queue-bound cell level (nothing when there is none)."""
    lines = []
    for lv in summary.levels:
        bound = [(cid, t) for cid, t in _cells(summary, lv.concurrency) if t.queue_bound]
        if bound:
            most = max(t.running_max or 0.0 for _, t in bound)
            lines.append(f"> - c={lv.concurrency}: {', '.join(cid for cid, _ in bound)} (the server ran at most "
                         f"{most:g} requests at once)")
    if not lines:
        return []
    return ["> **Queue-bound levels** (telemetry): at these levels the server queued requests for most of the level "
            "while others ran, so their latencies include queueing, not only the decode batch the server ran:",
            *lines, ""]
