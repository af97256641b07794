"""Live-server records: one JSON file per process-runtime server in ``state_dir()``.

The process runtime writes a record when it starts a server and removes it after a proven stop; the
leftover gate and `kit clean` read them to find servers a dead kit left behind. Both import this
module (and not each other).

A PGID is only a number: once the group is gone the kernel hands it out again. So a record also holds
its leader's identity, read when the server started: the start time (``/proc/PID/stat`` field 22, clock
ticks since boot) and the command line. A recorded group counts (may be blamed, may be signalled) only
while its leader has that identity; when the leader is gone, its surviving members count only if none
started before the leader did.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TypedDict, cast

from kit.plumbing.files import atomic_write
from kit.plumbing.procs import PROC, group_members, stat_fields

STARTTIME_FIELD = 19  # index of /proc/PID/stat field 22 (starttime) in stat_fields()


class ServerRecord(TypedDict):
    """What kit knows about a live process-runtime server group."""

    pgid: int
    pid: int
    run_id: str | None
    cell: str | None
    command: list[str]
    started: str  # UTC, kit.plumbing.clock format (older records: isoformat with +00:00)
    boot_id: str | None
    start_ticks: int | None  # the leader's start time (absent in records of older kit versions)
    cmdline: list[str] | None  # the leader's /proc cmdline right after it started


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None when it is gone)."""
    fields = stat_fields(pid, proc)
    try:
        return int(fields[STARTTIME_FIELD]) if fields else None
    except (IndexError, ValueError):
        return None


def cmdline(pid: int, proc: Path = PROC) -> list[str] | None:
    """The command line of ``pid`` as the kernel shows it (None when gone or unreadable)."""
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]] if raw else None


def state_dir() -> Path:
    """Where kit keeps live-server records (for the leftover gate and `kit clean`)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kit" / "servers"


def boot_id() -> str | None:
    """This boot's id: a record from an earlier boot names process groups that no longer exist."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def record_path(pgid: int, directory: Path | None = None) -> Path:
    return (directory or state_dir()) / f"{pgid}.json"


def write_record(record: ServerRecord, directory: Path | None = None) -> Path:
    return atomic_write(record_path(record["pgid"], directory), json.dumps(record).encode())


def read_record(path: Path) -> ServerRecord | None:
    """The record in ``path``, or None when it cannot be read or names no process group (perhaps it is
    being written right now)."""
    try:
        doc = json.loads(path.read_text())
        int(doc["pgid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cast(ServerRecord, doc) if isinstance(doc, dict) else None


def record_files(directory: Path | None = None) -> list[Path]:
    """Every record file, sorted (none when the directory does not exist)."""
    d = directory or state_dir()
    return sorted(d.glob("*.json")) if d.is_dir() else []


def same_boot(record: ServerRecord) -> bool:
    """False when the record was written before this boot (its group cannot exist any more)."""
    return record.get("boot_id") in (None, boot_id())


def identity_mismatch(record: ServerRecord, proc: Path = PROC) -> str | None:
    """Why the live process group numbered ``record["pgid"]`` is not the one recorded (None: it is).

    The leader alive: its start time and command line must be the recorded ones. The leader gone: every
    member must have started no earlier than the recorded leader. A record without the leader's start
    time (older kit) proves nothing, so it never counts."""
    pgid = int(record["pgid"])
    want = record.get("start_ticks")
    if not isinstance(want, int):
        return "the record holds no start time for the group's leader (written by an older kit)"
    now = start_ticks(pgid, proc)
    if now is not None:
        if now != want:
            return f"PID {pgid} now started at tick {now}, the recorded leader at tick {want}: the PGID was reused"
        if record.get("cmdline") is not None and cmdline(pgid, proc) != record.get("cmdline"):
            return f"PID {pgid} now runs {cmdline(pgid, proc)!r}, not the recorded {record.get('cmdline')!r}"
        return None
    early = [p for p in group_members(pgid, proc) if (start_ticks(p, proc) or want) < want]
    if early:
        return f"processes {early} of group {pgid} started before the recorded leader: the PGID was reused"
    return None


def recorded_members(record: ServerRecord, proc: Path = PROC) -> tuple[list[int], str | None]:
    """The live members of the recorded group, and why none count when the PGID is someone else's now.
    Empty (with no reason) when the group is gone or the record is from an earlier boot."""
    if not same_boot(record):
        return [], None
    members = group_members(int(record["pgid"]), proc)
    if not members:
        return [], None
    why = identity_mismatch(record, proc)
    return ([], why) if why else (members, None)
