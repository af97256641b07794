"""The leftover gates: no kit server of another run is still alive, as a container or as a process group.

Containers are found by their ``kit.run`` label; process-runtime servers by the records the process
runtime keeps in ``state_dir()`` (``kit.runtime.records``: one JSON file per live server). A record
whose process group is gone is stale: it is deleted, and the evidence says so. Before a start any live
kit server blocks; after a stop only this run's own (the "after" gate proves the stop left nothing behind).

A server or container of a run that another kit process is running right now (its run lock held, its kit
the recorded process: ``kit.runtime.records.live_owner``; where the lock is in another lock directory, the kit
process its record or its container's labels name: ``other_live_owner``, ``labelled_owner``) is no leftover: it
never blocks, the evidence and the message name whose it is (run id, kit pid), and no hint sends anyone to
`kit clean` for it (which leaves it alone too). Whether two runs may share the host is the reservations'
question (``kit.gates.reserve``).
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypedDict

from kit.errors import GateFailed
from kit.gates import procinfo
from kit.gates.procinfo import ProcInfo
from kit.gates.result import Check, Timer
from kit.manifest import Manifest
from kit.plumbing.dockerconn import ask_docker
from kit.runtime.recorded import recorded_cgroup, recorded_members
from kit.runtime.records import (
    RUN_LABEL,
    RunOwner,
    ServerRecord,
    labelled_owner,
    live_run_records,
    owner_text,
    read_record,
    record_files,
    state_dir,
)

CONTAINERS = "leftover_containers"
PROCESSES = "leftover_processes"


class ContainerSeen(TypedDict):
    id: str
    name: str
    status: str
    run: str | None
    cell: str | None
    labels: dict[str, str]


class ContainersEvidence(TypedDict, total=False):
    docker: None  # present (null) when Docker could not be asked
    reason: str | None
    runtime: str
    skipped: bool
    found: list[ContainerSeen]
    blocking: list[str]
    run_id: str | None
    of_live_runs: dict[str, RunOwner]  # container id -> the live run (of another kit process) it belongs to


class LiveGroup(ServerRecord):
    file: str
    members: list[ProcInfo]


class StaleRecord(ServerRecord):
    file: str
    removed: bool
    error: str | None  # why it could not be removed


class OwnedGroup(ServerRecord):
    file: str
    owner: RunOwner


class ProcessesEvidence(TypedDict):
    state_dir: str
    live: list[LiveGroup]
    of_live_runs: list[OwnedGroup]  # servers of runs another kit process is running now: not leftovers
    stale: list[StaleRecord]
    unreadable: list[str]
    blocking: list[int]
    run_id: str | None


def _counts(item_run: str | None, run_id: str | None, phase: str) -> bool:
    """Whether a live server of run ``item_run`` fails this phase.

    Before a start (and for the doctor) any live kit server blocks. After a stop the gate proves that
    *this* run left nothing behind; a server of another run that appeared meanwhile is recorded as
    evidence and blocks the next start instead.
    """
    if phase == "after" and run_id is not None:
        return item_run == run_id
    return True


def _list_kit_containers(client: Any | None) -> tuple[list[ContainerSeen] | None, str | None]:
    """Running containers labelled kit.run, or None and the reason Docker could not be asked."""
    return ask_docker(lambda c: [_container(x) for x in c.containers.list(filters={"label": RUN_LABEL})], client,
                      error=GateFailed)


def check_containers(m: Manifest, *, run_id: str | None, phase: str, client: Any | None = None) -> Check:
    timer = Timer()
    found, error = _list_kit_containers(client)
    if found is None:
        evidence = ContainersEvidence(docker=None, reason=error, runtime=m.runtime)
        if m.runtime != "docker":
            evidence["skipped"] = True
            return timer.check(CONTAINERS, True, f"skipped: Docker not reachable ({error})", None, evidence)
        return timer.check(
            CONTAINERS, False, f"Docker not reachable ({error}); the manifest's runtime is docker",
            "start the Docker engine (e.g. `dockerd &` or `systemctl start docker`) or set DOCKER_HOST", evidence,
        )
    owned = {c["id"]: o for c in found if c["run"] != run_id and (o := labelled_owner(c["labels"])) is not None}
    blocking = [c for c in found if c["id"] not in owned and _counts(c["run"], run_id, phase)]
    evidence = ContainersEvidence(found=found, blocking=[c["id"] for c in blocking], run_id=run_id,
                                  of_live_runs=owned)
    if not blocking:
        note = f" ({len(found)} running, not blocking in phase {phase})" if found else ""
        return timer.check(CONTAINERS, True, f"no blocking kit container{note}{_left_alone(owned.values())}", None,
                           evidence)
    names = ", ".join(f"{c['name']} ({c['id'][:12]}, run {c['run']}, cell {c['cell']})" for c in blocking)
    ids = " ".join(c["id"][:12] for c in blocking)
    return timer.check(CONTAINERS, False, f"{len(blocking)} kit container(s) still running: {names}",
                       f"kit clean, or docker rm -f {ids}", evidence)


def _left_alone(owners: Iterable[RunOwner]) -> str:
    """``; N server(s) of live runs left alone: run R (kit pid P, ...)`` (empty when none)."""
    found = list(owners)
    if not found:
        return ""
    whose = "; ".join(dict.fromkeys(owner_text(o) for o in found))
    return f"; {len(found)} server(s) of live run(s) of another kit process, not leftovers, left alone: {whose}"


def _container(c: Any) -> ContainerSeen:
    labels = dict(c.labels or {})
    return ContainerSeen(id=c.id, name=c.name, status=c.status, run=labels.get(RUN_LABEL),
                         cell=labels.get("kit.cell"), labels=labels)


def check_process_groups(*, run_id: str | None, phase: str, directory: Path | None = None) -> Check:
    timer = Timer()
    directory = directory or state_dir()
    live: list[LiveGroup] = []
    stale: list[StaleRecord] = []
    unreadable: list[str] = []
    for path in record_files(directory):
        record = read_record(path)
        if record is None:
            unreadable.append(str(path))  # perhaps being written right now: leave it alone
            continue
        members, _foreign = recorded_members(record)  # a reused PGID is not this record's group: stale
        if members:
            live.append(LiveGroup(**record, file=str(path), members=[procinfo.describe(p) for p in members]))
            continue
        if (cgroup := recorded_cgroup(record)) is not None:
            cgroup.remove()  # empty: all of it is gone
        try:
            path.unlink()
            stale.append(StaleRecord(**record, file=str(path), removed=True, error=None))
        except OSError as e:
            stale.append(StaleRecord(**record, file=str(path), removed=False, error=str(e)))
    owned = [OwnedGroup(**record, file=str(path), owner=owner) for path, record, owner in live_run_records(directory)]
    blocking = [g for g in live if _counts(g.get("run_id"), run_id, phase)]
    evidence = ProcessesEvidence(state_dir=str(directory), live=live, of_live_runs=owned, stale=stale,
                                 unreadable=unreadable, blocking=[g["pgid"] for g in blocking], run_id=run_id)
    removed = f"; removed {len(stale)} stale record(s) of group(s) already gone" if stale else ""
    removed += _left_alone(g["owner"] for g in owned)
    if not blocking:
        return timer.check(PROCESSES, True, f"no blocking kit server process group{removed}", None, evidence)
    cgroups = [recorded_cgroup(g) for g in blocking]  # checked: a record's own path is never shown as it is
    parts = [
        f"process group {g['pgid']} (run {g.get('run_id')}, cell {g.get('cell')}, started {g.get('started')}"
        + (f", cgroup {cgroup.path.name}" if cgroup else "") + "): "
        + ", ".join(procinfo.short(p) for p in g["members"])
        for g, cgroup in zip(blocking, cgroups, strict=True)
    ]
    groups = " ".join(f"-{g['pgid']}" for g in blocking)
    kills = " ".join(shlex.quote(f"{cgroup.path}/cgroup.kill") for cgroup in cgroups if cgroup)
    by_hand = f"kill -TERM -- {groups}" + (f" and echo 1 | tee {kills}" if kills else "")
    return timer.check(PROCESSES, False, f"{len(blocking)} kit server(s) still running: " + "; ".join(parts) + removed,
                       f"kit clean, or {by_hand}", evidence)
