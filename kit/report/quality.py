"""The untimed quality check in report.md: per arm, the accuracy pooled over its cells (with its Wilson 95 %
interval) and per cell, from each cell's ``quality.json``. Descriptive, never tested, never part of a verdict."""

from __future__ import annotations

from pathlib import Path

from kit.errors import BundleError
from kit.files.quality import QualityFile, wilson
from kit.files.read import read_file
from kit.files.summary import Summary


def cell_quality(root: Path, summary: Summary) -> dict[str, tuple[str, QualityFile]]:
    """cell id -> (arm, its quality.json), for the cells that have one (unreadable ones are skipped)."""
    out: dict[str, tuple[str, QualityFile]] = {}
    for cell in summary.cells:
        try:
            out[cell.id] = (cell.arm, read_file(root, f"cells/{cell.id}/quality.json", QualityFile))
        except BundleError:
            continue
    return out


def quality_section(cells: dict[str, tuple[str, QualityFile]]) -> list[str]:
    if not cells:
        return []
    first = next(iter(cells.values()))[1]
    lines = ["## Output quality (untimed, descriptive: not tested, not in any verdict)", "",
             f"{first.dataset} (sha256 {first.dataset_sha256[:12]}…), {first.shots}-shot, {first.asked} questions "
             f"per cell, {first.concurrency} at a time, temperature 0: the answer's last number against the label.",
             "", "| arm | cells | correct / asked | accuracy [95 % Wilson] | no number | no answer |",
             "|---|---|---|---|---|---|"]
    for arm in dict.fromkeys(a for a, _ in cells.values()):
        files = [f for a, f in cells.values() if a == arm]
        correct, asked = sum(f.correct for f in files), sum(f.asked for f in files)
        low, high = wilson(correct, asked)
        lines.append(f"| {arm} | {len(files)} | {correct} / {asked} | {correct / asked:.3f} [{low:.3f}, "
                     f"{high:.3f}] | {sum(f.no_number for f in files)} | {sum(f.errors for f in files)} |")
    return [*lines, ""]
