"""``kit verify``'s hold of what was intended against what was sent: each level's workload file hashes to what
``workload/index.json`` says, and every record that names a workload line (``workload_index``) names one that
exists, with the prompt-token count that line carries. Bounded reads; problems are returned, not raised."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kit.errors import BundleError
from kit.files.workload import WorkloadIndex
from kit.plumbing.jsontypes import loads
from kit.stats.bundle import RecordStream

MAX_LINES = 10_000_000


MAX_RECORD_LINE = 64 << 20  # far above any record kit's driver writes (kit.files.bounds.max_record_bytes)


def _lines(path: Path) -> list[dict[str, object]]:
    """A workload file's items (it hashed to what the index records); ValueError naming the first bad line."""
    out = []
    with path.open("rb") as f:
        for n, line in enumerate(f):
            if n >= MAX_LINES:
                break
            item = loads(line)
            if not isinstance(item, dict):
                raise ValueError(f"line {n + 1} is not a JSON object")
            out.append(item)
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
        if not level.isdigit():  # never a path: "../x" would name a file outside the bundle
            problems.append(f"workload/index.json: level {level[:40]!r} is not a number")
            continue
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
        lv = f.parent.name.split("-", 1)[1]
        if not lv.isdigit():
            problems.append(f"{f.relative_to(root)}: not in a level-<concurrency> folder")
            continue
        try:
            c, fl = _match(root, f, int(lv), items, problems)
        except BundleError as exc:  # not UTF-8 or unreadable: said here (the summary's check says it too)
            problems.append(exc.message)
            continue
        checked, flagged = checked + c, flagged + fl
    note = (f"{index.dataset} dataset, {len(index.levels)} level file(s) as recorded; {checked} requests matched "
            f"to their lines, {flagged} with the server's prompt count off by more than one token")
    return note, problems[:20]


def _match(root: Path, f: Path, lv: int, items: dict[int, list[dict[str, object]]], problems: list[str],
           ) -> tuple[int, int]:
    """One records.jsonl's requests against their workload lines (read as the statistics read records: bounded
    lines, one that is not a JSON object skipped, as the summary counts it): (matched, flagged)."""
    checked = flagged = 0
    for rec in RecordStream(f, MAX_RECORD_LINE):
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
    return checked, flagged
