"""``kit verify``'s hold of what was intended against what was sent: each level's workload file hashes to what
``workload/index.json`` says, and every record that names a workload line (``workload_index``) names one that
exists, with the prompt-token count that line carries. Bounded reads; problems are returned, not raised."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kit.files.workload import WorkloadIndex
from kit.plumbing.jsontypes import loads

MAX_LINES = 10_000_000


def _lines(path: Path) -> list[dict[str, object]]:
    out = []
    with path.open("rb") as f:
        for n, line in enumerate(f):
            if n >= MAX_LINES:
                break
            out.append(loads(line))
    return out


def check_workload(root: Path) -> tuple[str, list[str]]:
    """(a note for the verify summary, problems)."""
    index_path = root / "workload" / "index.json"
    if not index_path.is_file():
        return "no workload (legacy word prompts)", []
    try:
        index = WorkloadIndex.model_validate_json(index_path.read_bytes())
    except ValueError as exc:
        return "unreadable", [f"workload/index.json: {str(exc)[:200]}"]
    problems: list[str] = []
    items: dict[int, list[dict[str, object]]] = {}
    for level, digest in index.levels.items():
        path = root / "workload" / f"level-{level}.jsonl"
        try:
            data = path.read_bytes()
        except OSError as exc:
            problems.append(f"workload/level-{level}.jsonl: {exc}")
            continue
        if hashlib.sha256(data).hexdigest() != digest:
            problems.append(f"workload/level-{level}.jsonl does not hash to what workload/index.json records")
            continue
        try:
            items[int(level)] = _lines(path)
        except ValueError as exc:
            problems.append(f"workload/level-{level}.jsonl: {exc}")
    checked = flagged = 0
    for f in sorted(root.glob("cells/*/level-*/records.jsonl")):
        lv = int(f.parent.name.split("-", 1)[1])
        for rec in _lines(f):
            if "workload_index" not in rec:
                continue
            i = rec["workload_index"]
            lines = items.get(lv, [])
            if not isinstance(i, int) or not 0 <= i < len(lines):
                problems.append(f"{f.relative_to(root)}: request {rec.get('rid')} names workload line {i}, which "
                                f"workload/level-{lv}.jsonl does not have")
                continue
            if rec.get("prompt_tokens_expected") != lines[i].get("prompt_tokens"):
                problems.append(f"{f.relative_to(root)}: request {rec.get('rid')} expected "
                                f"{rec.get('prompt_tokens_expected')} prompt tokens, its workload line says "
                                f"{lines[i].get('prompt_tokens')}")
            checked += 1
            flagged += bool(rec.get("prompt_flag"))
    note = (f"{index.dataset} dataset, {len(index.levels)} level file(s) as recorded; {checked} requests matched "
            f"to their lines, {flagged} with the server's prompt count off by more than one token")
    return note, problems[:20]
