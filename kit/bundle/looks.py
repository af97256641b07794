"""``kit verify`` of a sequential run's looks (``looks/<k>.json``): each recomputed from the records of the cells
it names, after the recomputed looks before it, and compared field by field (``kit.stats.bundle``)."""

from __future__ import annotations

import json
from pathlib import Path

from kit.errors import KitError
from kit.manifest import load_manifest
from kit.plumbing.jsontypes import loads
from kit.stats.bundle import recompute_looks


def look_difference(a: object, b: object, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k == "schema_version" and not path:
                continue
            if k not in a or k not in b:
                return f"{path}{k} (only in the {'recorded' if k in a else 'recomputed'} look)"
            d = look_difference(a[k], b[k], f"{path}{k}.")
            if d is not None:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path.rstrip('.')} ({len(a)} recorded, {len(b)} recomputed)"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            d = look_difference(x, y, f"{path}{i}.")
            if d is not None:
                return d
        return None
    return None if a == b else f"{path.rstrip('.')} (recorded {a!r}, recomputed {b!r})"


def check_looks(root: Path) -> tuple[str | None, list[str]]:
    """(the note for `kit verify`, problems): None and no problem when the bundle has no sequential design."""
    if not (root / "manifest.yaml").is_file():
        return None, []
    try:
        m = load_manifest(root / "manifest.yaml", allow_unpinned=True).manifest
        if m.design.sequential is None:
            return None, [] if not (root / "looks").exists() else ["looks/: a fixed design records no looks"]
        pairs = recompute_looks(root, m)
    except KitError as e:
        return None, [f"looks: cannot recompute them ({e.message})"]
    problems = []
    for recorded, fresh in pairs:
        where = look_difference(loads(json.dumps(recorded)), loads(json.dumps(fresh)))
        if where is not None:
            problems.append(f"looks/{recorded['look']:03d}.json: differs from the look recomputed from the "
                            f"records at {where}")
    last = pairs[-1][1] if pairs else None
    stop = f", stopped: {last['stop']}" if last and last.get("stop") else ""
    return f"{len(pairs)} sequential look(s) recomputed from the records OK{stop}", problems
