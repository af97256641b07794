"""Live-server records: one JSON file per process-runtime server in ``state_dir()``, and the run locks that
say which kit runs are alive (``runs_dir()``: one ``run-RUN_ID.lock`` per run, flock-held by its kit for the
whole run; ``kit.gates.reserve`` takes them with the run's GPUs and ports).

The process runtime writes a record when it starts a server and removes it after a proven stop; the
leftover gate and `kit clean` read them to find servers a dead kit left behind. Both import this
module (and not each other). A server whose run is live in another kit process is that run's, not a
leftover: ``record_files`` leaves it out (so nothing that lists leftovers can signal it) and
``live_run_records`` lists it with its owner.

A run is live while its lock is held or its kit is still the recorded process (pid, start time, boot):
the lock goes with the process (flock), the identity check covers a lock test that cannot be made.

A PGID is only a number: once the group is gone the kernel hands it out again. So a record also holds
its leader's identity, read when the server started: the start time (``/proc/PID/stat`` field 22, clock
ticks since boot) and the command line. A recorded group counts (may be blamed, may be signalled) only
while its leader has that identity; when the leader is gone, its surviving members count only if none
started before the leader did.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from kit.errors import GateFailed
from kit.plumbing.cgroups import Cgroup
from kit.plumbing.files import atomic_write
from kit.plumbing.jsontypes import loads
from kit.plumbing.procs import PROC, group_members, start_ticks
from kit.runtime.lockdir import lock_dir, open_lock, read_lock, user_name

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # a run id as kit makes them, and a safe file name


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
    cmdline: list[str] | None  # the leader's /proc cmdline once it runs the command (shown; not its identity)
    kit_pid: NotRequired[int]  # the kit process that started it, and that process's start time: a run whose lock
    kit_start_ticks: NotRequired[int | None]  # is in another KIT_LOCK_DIR is still known live by its kit
    workdir: NotRequired[str]  # the process runtime: the empty directory it runs in, removed with the leftover
    cgroup: NotRequired[str]  # the cgroup it runs in (kit.plumbing.cgroups), when kit could make one


def same_process(pid: int, ticks: object, proc: Path = PROC) -> bool:
    """Whether ``pid`` is still the process that started at ``ticks`` (an int from ``start_ticks``; anything else,
    None included, proves nothing: False)."""
    return isinstance(ticks, int) and start_ticks(pid, proc) == ticks


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
        doc = loads(path.read_text())
        int(doc["pgid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cast(ServerRecord, doc) if isinstance(doc, dict) else None


def all_record_files(directory: Path | None = None) -> list[Path]:
    """Every record file, sorted (none when the directory does not exist)."""
    d = directory or state_dir()
    return sorted(d.glob("*.json")) if d.is_dir() else []


def record_files(directory: Path | None = None) -> list[Path]:
    """The record files of servers no other live kit owns (leftovers, or this process's own), sorted. An
    unreadable record is listed (the caller decides); one of another process's live run is not."""
    return [p for p in all_record_files(directory) if other_live_owner(read_record(p)) is None]


def live_run_records(directory: Path | None = None) -> list[tuple[Path, ServerRecord, RunOwner]]:
    """The records of servers that a live run of another kit process owns, with that owner."""
    out = []
    for path in all_record_files(directory):
        record = read_record(path)
        if (owner := other_live_owner(record)) is not None and record is not None:
            out.append((path, record, owner))
    return out


class RunOwner(TypedDict):
    """A run's lock file: which kit process runs it (``kit.gates.reserve`` writes it; ``user`` is added when read:
    the lock file's owner as the kernel says, never the content's)."""

    run_id: str
    pid: int
    start_ticks: int | None
    boot_id: str | None
    experiment: str
    bundle: str
    started: str
    ports: list[int]
    gpus: list[str]
    user: NotRequired[str]
    note: NotRequired[str]  # an owner nothing could be read of: why (then run_id is "?")


def runs_dir() -> Path:
    """Where the live runs' lock files are: the host-wide reservation directory (``kit.runtime.lockdir``),
    shared by every user, so that runs of two users see each other."""
    return lock_dir(create=False)


def run_lock_path(run_id: str) -> Path:
    return runs_dir() / f"run-{run_id}.lock"


def unknown_owner(note: str) -> RunOwner:
    """The owner of a held lock whose run cannot be named (its record unreadable, or not written yet)."""
    return RunOwner(run_id="?", pid=0, start_ticks=None, boot_id=None, experiment="?", bundle="?", started="?",
                    ports=[], gpus=[], note=note)


def lock_held(path: Path) -> bool:
    """Whether some open file holds an exclusive flock on ``path`` (False when it does not exist; True when it
    cannot be opened to tell: a link or an unreadable file is never taken for free)."""
    try:
        lock = open_lock(path, create=False)
    except GateFailed:
        return True
    if lock is None:
        return False
    try:
        fcntl.flock(lock.fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(lock.fd)
    return False


def read_owner(path: Path) -> RunOwner | None:
    """The run lock's record, bounded and checked field by field (None when absent, unreadable or malformed)."""
    if (got := read_lock(path)) is None:
        return None
    text, uid = got
    try:
        doc = loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or not _valid_owner(doc):
        return None
    owner = cast(RunOwner, {k: doc[k] for k in _OWNER_KEYS})
    owner["user"] = user_name(uid)
    return owner


_OWNER_KEYS = ("run_id", "pid", "start_ticks", "boot_id", "experiment", "bundle", "started", "ports", "gpus")


def _valid_owner(doc: dict[str, object]) -> bool:
    ints = all(type(doc.get(k)) is int for k in ("pid",)) and all(
        doc.get(k) is None or type(doc.get(k)) is int for k in ("start_ticks",))
    strs = all(isinstance(doc.get(k), str) and len(str(doc[k])) <= 4096 for k in
               ("run_id", "experiment", "bundle", "started")) and (doc.get("boot_id") is None or
                                                                   isinstance(doc.get("boot_id"), str))
    ports, gpus = doc.get("ports"), doc.get("gpus")
    lists = (isinstance(ports, list) and all(type(p) is int for p in ports)
             and isinstance(gpus, list) and all(isinstance(g, str) for g in gpus))
    return ints and strs and lists and _RUN_ID.fullmatch(str(doc.get("run_id"))) is not None


def owner_alive(owner: RunOwner, proc: Path = PROC) -> bool:
    """Whether the recorded kit process is still the one that took the lock (same boot, same start time)."""
    if owner.get("boot_id") not in (None, boot_id()):
        return False
    return same_process(int(owner["pid"]), owner.get("start_ticks"), proc)


def live_owner(run_id: str | None) -> RunOwner | None:
    """The kit process running ``run_id`` right now, or None (no such run, or its kit is gone)."""
    if not run_id or _RUN_ID.fullmatch(run_id) is None:
        return None
    path = run_lock_path(run_id)
    owner = read_owner(path)
    if owner is not None and owner["run_id"] != run_id:
        owner = None  # a record that names another run: not this one's
    if lock_held(path):  # being written, or unreadable: still live
        return owner or RunOwner(run_id=run_id, pid=0, start_ticks=None, boot_id=None, experiment="?",
                                 bundle="?", started="?", ports=[], gpus=[], user=_file_user(path))
    return owner if owner is not None and owner_alive(owner) else None


def _file_user(path: Path) -> str:
    try:
        return user_name(os.lstat(path).st_uid)
    except OSError:
        return "?"


def other_live_run(run_id: str | None) -> RunOwner | None:
    """The owner of ``run_id`` when another kit process runs it now (None: no such run, its kit is gone, or
    it is this process's own)."""
    owner = live_owner(run_id)
    return owner if owner is not None and not is_self(owner) else None


def is_self(owner: RunOwner) -> bool:
    """Whether ``owner`` is this very process (pid and start time: a pid alone repeats across PID namespaces)."""
    return owner["pid"] == os.getpid() and owner.get("start_ticks") in (None, start_ticks(os.getpid()))


def other_live_owner(record: ServerRecord | None) -> RunOwner | None:
    """The live run of another kit process that owns the server of ``record`` (None: a leftover, or ours): by its
    run lock, or, where that lock is in another lock directory (KIT_LOCK_DIR), by the kit process the record names
    (pid, start time, boot)."""
    if record is None:
        return None
    owner = other_live_run(record.get("run_id"))
    kit_pid = record.get("kit_pid")
    if owner is not None or not isinstance(kit_pid, int):
        return owner
    started = RunOwner(run_id=str(record.get("run_id") or "?"), pid=kit_pid, start_ticks=record.get("kit_start_ticks"),
                       boot_id=record.get("boot_id"), experiment="?", bundle="?", started=str(record["started"]),
                       ports=[], gpus=[], user="?", note="its run lock is not in this lock directory")
    if is_self(started) or not owner_alive(started):
        return None
    return started


# labels kit puts on each container it creates, beside the cell's kit.* labels: the kit process that made it (pid,
# start time, boot), so that a container of a live run whose lock is in another lock directory is that run's, as a
# process-runtime server's record says by its kit_pid / kit_start_ticks
KIT_PID_LABEL, KIT_TICKS_LABEL, KIT_BOOT_LABEL = "kit.pid", "kit.start_ticks", "kit.boot"
_DIGITS = re.compile(r"[0-9]{1,20}")


def maker_labels() -> dict[str, str]:
    """This kit process as container labels (its pid, start time and boot; the start time or boot left out where
    they cannot be read)."""
    ticks, boot = start_ticks(os.getpid()), boot_id()
    return {KIT_PID_LABEL: str(os.getpid()), **({KIT_TICKS_LABEL: str(ticks)} if ticks is not None else {}),
            **({KIT_BOOT_LABEL: boot} if boot else {})}


def labelled_owner(labels: dict[str, str]) -> RunOwner | None:
    """The live run of another kit process that owns a container with these labels (None: a leftover, or ours):
    by its run lock (``kit.run``), or by the kit process its ``maker_labels`` name. A malformed label proves
    nothing (the container is then judged by its run lock alone)."""
    pid, ticks = labels.get(KIT_PID_LABEL, ""), labels.get(KIT_TICKS_LABEL, "")
    run_id = labels.get("kit.run")
    record: dict[str, object] = {"run_id": run_id if isinstance(run_id, str) else None, "started": "?",
                                 "boot_id": labels.get(KIT_BOOT_LABEL)}
    if _DIGITS.fullmatch(pid) and _DIGITS.fullmatch(ticks):
        record |= {"kit_pid": int(pid), "kit_start_ticks": int(ticks)}
    return other_live_owner(cast(ServerRecord, record))


def owner_text(owner: RunOwner) -> str:
    """``run ID (kit pid P, user U, experiment E, bundle B)``: whose a live server or reservation is."""
    if owner["run_id"] == "?":
        return f"a run of another kit process ({owner.get('note') or 'its run cannot be named'})"
    return (f"run {owner['run_id']} (kit pid {owner['pid']}, user {owner.get('user', '?')}, experiment "
            f"{owner['experiment']}, bundle {owner['bundle']})")


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
    return sorted(set([] if why else members) | set(inside)), why
