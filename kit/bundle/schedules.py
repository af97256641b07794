"""``kit verify``: every open-loop level's records against the schedule rebuilt from its settings (intended vs sent).

The level's settings are the ``spec`` in its ``client.json`` (arrival process, rate, burstiness, seed, budget,
duration); the schedule is a pure function of them (``kit.load.arrivals``), so a record whose ``sched_ns`` is
not in it, or a request missing from both the records and the ``unsent`` counts, means the records are not what
that level sent. Bundles of closed-loop levels, and of kits before open loop, have nothing to check.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from kit.load.arrivals import check_sent
from kit.load.spec import LevelSpec
from kit.stats.bundle import read_json, read_records

MAX_PROBLEMS = 5


def check_schedules(root: Path) -> tuple[str, list[str]]:
    """A note for the verify summary and the problems found (empty: every open-loop level agrees)."""
    levels = 0
    problems: list[str] = []
    for client_path in sorted(root.glob("cells/*/level-*/client.json")):
        doc = read_json(client_path)
        spec = _spec(doc.get("spec") if isinstance(doc, dict) else None)
        if spec is None or not spec.arrivals.open_loop or doc.get("stopped"):
            continue
        stream = read_records(client_path.parent / "records.jsonl")
        sched = [t for r in stream or [] if isinstance(t := r.get("sched_ns"), int)]
        unsent = sum(int(w.get("unsent") or 0) for w in doc.get("workers") or [] if isinstance(w, dict))
        rel = client_path.parent.relative_to(root)
        try:
            found = check_sent(spec.arrivals, spec.scheduled(), sched, unsent)
        except ValueError as e:  # settings no kit writes: the schedule cannot be rebuilt
            found = [f"its schedule cannot be rebuilt: {e}"]
        problems += [f"{rel}: {p}" for p in found]
        levels += 1
    if not levels:
        return "no open-loop level", []
    return f"{levels} open-loop level(s) sent as scheduled" if not problems else "", problems[:MAX_PROBLEMS]


def _spec(raw: Any) -> LevelSpec | None:
    if not isinstance(raw, dict):
        return None
    names = {f.name for f in dataclasses.fields(LevelSpec)}
    try:
        return LevelSpec(**{k: v for k, v in raw.items() if k in names})
    except TypeError:  # an older or foreign spec without the fields a level needs
        return None
