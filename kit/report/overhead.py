"""kit's own time per cell, from each cell's ``cell.json``: the cell's wall time less the server's readiness,
the levels' load and the server's stop (gates, writes, scrapes and load-driver hand-offs)."""

from __future__ import annotations

import statistics
from pathlib import Path

from kit.errors import BundleError
from kit.files.cell import CellFile
from kit.files.read import read_file
from kit.files.summary import Summary

GOAL_S = 1.0


def cell_overheads(root: Path, summary: Summary) -> dict[str, CellFile]:
    """The cell.json of every cell of the summary that recorded its overhead (unreadable ones are skipped:
    the report is a courtesy, ``kit verify`` judges the files)."""
    out: dict[str, CellFile] = {}
    for cell in summary.cells:
        try:
            state = read_file(root, f"cells/{cell.id}/cell.json", CellFile)
        except BundleError:
            continue
        if state.kit_overhead_s is not None and state.overhead_parts is not None:
            out[cell.id] = state
    return out


def overhead_section(cells: dict[str, CellFile]) -> list[str]:
    if not cells:
        return []
    values = [c.kit_overhead_s for c in cells.values() if c.kit_overhead_s is not None]
    lines = ["## kit's own time per cell", "",
             f"Median {statistics.median(values):.2f} s, max {max(values):.2f} s over {len(values)} cell(s) "
             f"(goal ≤ {GOAL_S:g} s): each cell's wall time less the server's start-up to ready, the levels' "
             "load (warm-ups included: the manifest asks for them) and the server's stop.", "",
             "| cell | cell wall s | ready s | levels s | warm-ups s | stop s | kit s |",
             "|---|---|---|---|---|---|---|"]
    for cid, c in cells.items():
        p = c.overhead_parts
        assert p is not None
        lines.append(f"| {cid} | {p.cell_wall_s:.2f} | {p.ready_s:.2f} | {p.levels_wall_s:.2f} | {p.warmup_s:.2f} "
                     f"| {p.stop_s:.2f} | {c.kit_overhead_s:.2f} |")
    return [*lines, ""]
