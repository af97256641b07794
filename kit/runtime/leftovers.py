"""Process-runtime servers a dead kit left behind: found by the records the process runtime keeps
(``kit.runtime.records``) and stopped, with what left their groups (their cgroup, their leaders' parent links),
by `kit clean` and by a resume for its own run. A PGID that is someone else's now is never signalled."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from kit.plumbing.cgroups import Cgroup, made_here
from kit.plumbing.procs import pid_namespace_inode, stop_group, tagged
from kit.runtime.process import WORKDIR_PREFIX, cgroup_workdir
from kit.runtime.recorded import recorded_cgroup, recorded_members, recorded_tag
from kit.runtime.records import (
    ServerRecord,
    all_record_files,
    cmdline,
    read_record,
    record_files,
    same_process,
)
from kit.runtime.subreaper import Adopted, stop_escapes, stop_rescanned


@dataclass(frozen=True)
class LeftoverStops:
    """What ``kill_leftover_groups`` did: groups stopped, stale records dropped (with why), and groups that
    outlived SIGKILL (their records kept, so that the leftover gate names them and a later clean retries)."""

    stopped: list[str]
    stale: list[str]
    survived: list[str]


def kill_leftover_groups(grace_s: float = 5.0, *, run_id: str | None = None) -> LeftoverStops:
    """Stop every process-runtime server group recorded in state_dir() that no other live kit owns (``run_id``:
    only that run's) and whose leader is still the recorded process (SIGTERM, grace, SIGKILL), dropping the
    records of the groups that are gone. A PGID that now belongs to another process is never signalled: its record
    is dropped as stale, saying why. `kit clean` calls this for every run; a resume for its own run id."""
    stopped: list[str] = []
    stale: list[str] = []
    survived: list[str] = []
    for path in record_files():
        record = read_record(path)
        if record is None or (run_id is not None and record.get("run_id") != run_id):
            continue
        pgid = int(record["pgid"])
        members, foreign = recorded_members(record)
        cgroup = recorded_cgroup(record)
        tag = recorded_tag(record)
        if not members:
            why = f"not signalled: {foreign}" if foreign else "already gone"
            (stale if _forget(path, record, cgroup) else survived).append(f"{path.name} (group {pgid} {why})"
                                                                          + _kept(cgroup))
            continue
        what = f"group {pgid} (run {record.get('run_id')}, cell {record.get('cell')}): "
        what += " ".join(record.get("command", []))[:80]
        left: list[int] = []
        escaped: list[int] = []
        if foreign is None:  # the PGID is still the recorded leader's: the group is the server's
            adopted = Adopted(pgid, pgid, partial(same_process, pgid, record.get("start_ticks")))
            left = stop_group(pgid, grace_s, reap=adopted.watch).left
            escaped = adopted.still_there()
        escaped = sorted(set(escaped) | set(cgroup.procs() if cgroup else []) | set(tagged(tag) if tag else []))
        if escaped:
            what += f" (and {len(escaped)} that left its group: PIDs {escaped})"
            left += stop_escapes(escaped, cgroup, grace_s)
        if tag:  # what keeps forking away outruns one scan
            left, _later = stop_rescanned(partial(tagged, tag, stop=True), left)
        if left:
            survived.append(f"{what} (processes {left} still there after SIGKILL)")
            continue
        (stopped if _forget(path, record, cgroup) else survived).append(what + _kept(cgroup))
    if run_id is None:
        _unrecorded(grace_s, stopped, stale, survived)
    return LeftoverStops(stopped, stale, survived)


def _unrecorded(grace_s: float, stopped: list[str], stale: list[str], survived: list[str]) -> None:
    """The cgroups of servers no record names whose kit is gone (killed between making one and recording its
    server): what is in one is stopped as a leftover, and the directory removed. A live kit's are never touched, nor
    those of a kit in another PID namespace sharing this cgroup (its pid and start time mean nothing here)."""
    named = {str(c) for p in all_record_files() if (r := read_record(p)) is not None and (c := r.get("cgroup"))}
    here = pid_namespace_inode()
    for cgroup in made_here():
        if str(cgroup.path) in named or same_process(*cgroup.maker) or cgroup.maker_namespace not in (None, here):
            continue  # recorded, its kit alive, or a kit of another PID namespace (alive or not: cannot be told)
        inside = cgroup.procs()
        what = f"cgroup {cgroup.path} (no record names it: its kit died starting the server)"
        if inside:
            what += f": PIDs {inside} {' '.join(cmdline(inside[0]) or ['?'])[:80]}"
            if left := stop_escapes(inside, cgroup, grace_s):
                survived.append(f"{what} (processes {left} still there after SIGKILL)")
                continue
        if not cgroup.remove():
            survived.append(f"{what}{_kept(cgroup)}")
            continue
        _remove_kit_workdir(str(cgroup_workdir(cgroup)))  # made before the server started: maybe there
        if inside:
            stopped.append(what)
        else:
            stale.append(f"{what}: empty, removed")


def _forget(path: Path, record: ServerRecord, cgroup: Cgroup | None) -> bool:
    """A leftover server is gone: its working directory, its (empty) cgroup and its record go too; False (the
    record kept, for the gate and a later clean) when its cgroup cannot be removed."""
    _remove_workdir(record)
    if cgroup is not None and not cgroup.remove():
        return False
    path.unlink(missing_ok=True)
    return True


def _kept(cgroup: Cgroup | None) -> str:
    """`` (its cgroup ... could not be removed)`` when ``cgroup`` is still there, else nothing."""
    return f" (its cgroup {cgroup.path} could not be removed)" if cgroup is not None and cgroup.path.exists() else ""


def _remove_workdir(record: ServerRecord) -> None:
    """The directory a stopped server ran in (``ProcessRuntime.start``), when the record names one kit made."""
    _remove_kit_workdir(record.get("workdir"))


def _remove_kit_workdir(workdir: object) -> None:
    """``workdir`` removed when it is one kit makes: a kit-cwd-* directory right under the temp directory, never
    anything else."""
    if not isinstance(workdir, str):
        return
    p = Path(workdir)
    if p.parent == Path(tempfile.gettempdir()) and p.name.startswith(WORKDIR_PREFIX) and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
