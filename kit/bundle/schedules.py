"""``kit verify``: every open-loop level's records against the schedule rebuilt from the signed manifest.

The expected settings come from ``manifest.yaml`` (signed), through ``Load.arrival_at`` (the function ``kit run``
builds each level's spec with): process, rate, burstiness, seed (``load.seed + level + 7919``), budget and
duration. The ``spec`` a level's ``client.json`` holds is held against them (a kit that ran a level at another
rate or seed writes a spec and records that agree with each other, not with the manifest); the schedule is a
pure function of them (``kit.load.arrivals``), so a record whose ``sched_ns`` is not in it, or a request missing
from both the records and the ``unsent`` counts, means the records are not what the manifest asked for.

Send times too: every open-loop record of a worker obeys ``t_start_ns - sched_ns - queue_ns - late_ns == t0_ns``,
the worker's start in ``client.json`` (exact integer arithmetic in the driver, checked within ``SEND_TOLERANCE_NS``),
so a record sent off its due time whose ``late_ns`` does not say so is caught. Bundles of closed-loop levels, of
kits before open loop, and (for send times) of kits before ``t0_ns``, have nothing to check.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kit.errors import KitError
from kit.load.arrivals import check_sent
from kit.load.spec import LevelSpec
from kit.manifest import Manifest, load_manifest
from kit.stats.bundle import read_json, read_records

MAX_PROBLEMS = 5
SEND_TOLERANCE_NS = 1_000
TIMING = ("arrival", "rate", "burstiness", "arrival_seed", "duration_s")


def check_schedules(root: Path) -> tuple[str, list[str]]:
    """A note for the verify summary and the problems found (empty: every open-loop level agrees)."""
    clients = sorted(root.glob("cells/*/level-*/client.json"))
    docs = [(p, doc) for p in clients if isinstance(doc := read_json(p), dict) and not doc.get("stopped")]
    if not docs:
        return "no open-loop level", []
    m, why = _manifest(root)
    if m is None:  # kit verify names an unreadable manifest itself; here it matters only for open-loop levels
        if any(_open_loop(doc.get("spec")) for _, doc in docs):
            return "", [f"open-loop levels cannot be checked: {why}"]
        return "no open-loop level", []
    levels, timed = 0, 0
    problems: list[str] = []
    for client_path, doc in docs:
        rel = client_path.parent.relative_to(root)
        level = _level(client_path.parent.name)
        if level is None or level not in m.load.levels:
            problems.append(f"{rel}: not a level of the signed manifest ({m.load.levels})")
            continue
        want = _expected(m, level)
        got = _spec(doc.get("spec"))
        if not want.arrivals.open_loop:
            if got is not None and got.arrivals.open_loop:
                problems.append(f"{rel}: client.json says {got.arrival}, the signed manifest a closed loop")
            continue
        levels += 1
        found = _settings(got, want)
        stream = list(read_records(client_path.parent / "records.jsonl") or [])
        sched = [t for r in stream if isinstance(t := r.get("sched_ns"), int)]
        workers = [w for w in doc.get("workers") or [] if isinstance(w, dict)]
        unsent = sum(int(w.get("unsent") or 0) for w in workers)
        try:
            found += check_sent(want.arrivals, want.scheduled(), sched, unsent)
        except ValueError as e:  # settings no kit writes: the schedule cannot be rebuilt
            found.append(f"its schedule cannot be rebuilt: {e}")
        send, checked = send_time_problems(stream, workers)
        timed += checked
        problems += [f"{rel}: {p}" for p in found + send]
    if not levels:
        return "no open-loop level", problems[:MAX_PROBLEMS]
    note = f"{levels} open-loop level(s) sent as the signed manifest scheduled"
    note += f" ({timed} send times checked)" if timed else " (send times not recorded: a kit before t0_ns)"
    return note if not problems else "", problems[:MAX_PROBLEMS]


def send_time_problems(records: Iterable[Mapping[str, object]],
                       workers: list[dict[str, Any]]) -> tuple[list[str], int]:
    """Records whose send time disagrees with their worker's start plus due time, queue and lateness; and how many
    records were checked (those of workers that recorded ``t0_ns``)."""
    t0 = {w.get("worker"): w["t0_ns"] for w in workers if isinstance(w.get("t0_ns"), int)}
    bad, checked, first = 0, 0, ""
    for r in records:
        start, sched, worker = r.get("t_start_ns"), r.get("sched_ns"), r.get("worker")
        if not isinstance(sched, int) or worker not in t0:
            continue
        queue, late = r.get("queue_ns"), r.get("late_ns")
        checked += 1
        if not (isinstance(start, int) and isinstance(queue, int) and isinstance(late, int)) or queue < 0 or late < 0:
            off = None
        else:
            off = start - sched - queue - late - t0[worker]
        if off is None or abs(off) > SEND_TOLERANCE_NS:
            bad += 1
            first = first or (f"{r.get('rid')}: sent {off / 1e6:+.3f} ms off its due time + queue + lateness"
                              if off is not None else f"{r.get('rid')}: no integer send time, queue or lateness")
    if not bad:
        return [], checked
    return [f"{bad} record(s) not sent when their sched_ns, queue_ns and late_ns say, from the worker's t0_ns "
            f"(first: {first}): not what was scheduled"], checked


def _manifest(root: Path) -> tuple[Manifest | None, str]:
    try:
        return load_manifest(root / "manifest.yaml", allow_unpinned=True).manifest, ""
    except KitError as e:
        return None, f"its signed manifest.yaml cannot be read ({e.message})"


def _expected(m: Manifest, level: int) -> LevelSpec:
    """The level's spec as far as its timing goes, from the manifest alone (the rest does not matter here)."""
    return LevelSpec(base_url="", endpoint=m.load.endpoint, model="", concurrency=level,
                     requests=m.load.requests_at(level), warmup_requests=m.load.warmup_at(level), prompt_tokens=1,
                     output_tokens=1, seed=0, request_timeout_s=1.0, processes=0, **m.load.arrival_at(level))


def _settings(got: LevelSpec | None, want: LevelSpec) -> list[str]:
    if got is None:
        return ["client.json holds no level spec to hold against the signed manifest"]
    diff = [f"{k} {getattr(got, k)!r} (manifest: {getattr(want, k)!r})" for k in TIMING
            if getattr(got, k) != getattr(want, k)]
    if got.scheduled() != want.scheduled():
        diff.append(f"{got.scheduled()} requests scheduled (manifest: {want.scheduled()})")
    return [f"client.json's level ran at other settings than the signed manifest's: {', '.join(diff)}"] if diff else []


def _open_loop(raw: Any) -> bool:
    spec = _spec(raw)
    return spec is not None and spec.arrivals.open_loop


def _level(name: str) -> int | None:
    tail = name.removeprefix("level-")
    return int(tail) if tail.isdigit() else None


def _spec(raw: Any) -> LevelSpec | None:
    if not isinstance(raw, dict):
        return None
    names = {f.name for f in dataclasses.fields(LevelSpec)}
    try:
        return LevelSpec(**{k: v for k, v in raw.items() if k in names})
    except TypeError:  # an older or foreign spec without the fields a level needs
        return None
