"""What a live-server record (``kit.runtime.records``) still names: the process group while its PGID is still the
recorded leader's (``identity_mismatch``: a PGID is only a number, handed out again once the group is gone), the
cgroup its kit made, and every process that carries the server's tag in its environment (what left the group and
any cgroup). The leftover gate, `kit clean` and a resume ask ``recorded_members``.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from kit.plumbing.cgroups import Cgroup
from kit.plumbing.procs import PROC, group_members, start_ticks, tagged
from kit.runtime.records import ServerRecord, boot_id
from kit.runtime.subreaper import found_again


def same_boot(record: ServerRecord) -> bool:
    """False when the record was written before this boot (its group cannot exist any more)."""
    return record.get("boot_id") in (None, boot_id())


def identity_mismatch(record: ServerRecord, proc: Path = PROC) -> str | None:
    """Why the live process group numbered ``record["pgid"]`` is not the one recorded (None: it is).

    The leader alive: its start time must be the recorded one (with the PID and the boot, the process itself: a
    PID is not handed out again within one clock tick). Its command line is not compared: a leader that exec'd
    (kit's subreaper shim, a shell's ``exec``, a server that re-execs itself) keeps its PID and start time and
    changes it, and such a leftover was once taken for a stranger, its record dropped and it left running. The
    leader gone: every member must have started no earlier than the recorded leader. A record without the
    leader's start time (older kit) proves nothing, so it never counts."""
    pgid = int(record["pgid"])
    want = record.get("start_ticks")
    if not isinstance(want, int):
        return "the record holds no start time for the group's leader (written by an older kit)"
    now = start_ticks(pgid, proc)
    if now is not None:
        if now != want:
            return f"PID {pgid} now started at tick {now}, the recorded leader at tick {want}: the PGID was reused"
        return None
    early = [p for p in group_members(pgid, proc) if (start_ticks(p, proc) or want) < want]
    if early:
        return f"processes {early} of group {pgid} started before the recorded leader: the PGID was reused"
    return None


def recorded_cgroup(record: ServerRecord) -> Cgroup | None:
    """The cgroup the record's server runs in, when it names one that the record's kit made (its name says which
    kit: PID and start time) and it still exists (this boot)."""
    maker = (record.get("kit_pid"), record.get("kit_start_ticks"))
    return Cgroup.recorded(record.get("cgroup"), maker) if same_boot(record) else None


def recorded_members(record: ServerRecord, proc: Path = PROC) -> tuple[list[int], str | None]:
    """The live processes of the recorded server: its group's members (while the PGID is still the recorded
    leader's) and everything in its cgroup (what left the group, whatever it did), and why the group's members do
    not count when the PGID is someone else's now. Empty (with no reason) when all is gone or the record is from
    an earlier boot."""
    if not same_boot(record):
        return [], None
    members = group_members(int(record["pgid"]), proc)
    why = identity_mismatch(record, proc) if members else None
    cgroup = recorded_cgroup(record) if proc == PROC else None
    inside = cgroup.procs() if cgroup is not None else []
    found = set([] if why else members) | set(inside)
    if tag := recorded_tag(record):  # where nothing else is left, one scan can miss what keeps forking away
        found |= set(tagged(tag, proc) if found else found_again(partial(tagged, tag, proc)))
    return sorted(found), why


_TAG = re.compile(r"[0-9a-f]{16}")


def recorded_tag(record: ServerRecord) -> str | None:
    """The tag in the environment of everything the record's server started (a daemon it left, with no cgroup to
    hold it, is found by it), when the record holds one of kit's (16 hex digits)."""
    tag = record.get("tag")
    return tag if isinstance(tag, str) and _TAG.fullmatch(tag) else None
