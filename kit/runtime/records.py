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

import contextlib
import fcntl
import json
import os
import re
from pathlib import Path
from typing import NotRequired, TypedDict, cast

from kit.errors import GateFailed
from kit.plumbing.files import atomic_write
from kit.plumbing.jsontypes import loads
from kit.plumbing.procs import PROC, STARTTIME_FIELD, pid_namespace_inode, start_ticks, stat_fields
from kit.runtime.lockdir import lock_dir, open_lock, read_lock, user_name

_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # a run id as kit makes them, and a safe file name


class Maker(TypedDict, total=False):
    """The kit process that started a server (in its record) or made a container (in its labels, as strings): a
    run whose lock is in another lock directory is still known live by it."""
    kit_pid: int
    kit_start_ticks: int | None
    kit_pidns: str | None  # its PID namespace (/proc/self/ns/pid): its pid means nothing in another
    kit_lock_dir: str | None  # where its run lock is: where it is the reader's, the lock alone says live or ended


class ServerRecord(Maker):
    """What kit knows about a live process-runtime server group (and its kit: ``Maker``, absent in older records)."""

    pgid: int
    pid: int
    run_id: str | None
    cell: str | None
    command: list[str]
    started: str  # UTC, kit.plumbing.clock format (older records: isoformat with +00:00)
    boot_id: str | None
    start_ticks: int | None  # the leader's start time (absent in records of older kit versions)
    cmdline: list[str] | None  # the leader's /proc cmdline once it runs the command (shown; not its identity)
    workdir: NotRequired[str]  # the process runtime: the empty directory it runs in, removed with the leftover
    tag: NotRequired[str]  # KIT_SERVER_TAG's value in its environment: what it started, wherever that went
    cgroup: NotRequired[str]  # the cgroup it runs in (kit.plumbing.cgroups), when kit could make one


def same_process(pid: int, ticks: object, proc: Path = PROC) -> bool:
    """Whether ``pid`` is still the process that started at ``ticks`` (an int from ``start_ticks``; anything else,
    None included, proves nothing: False) and has not ended: a zombie (killed, its parent not yet reaping it, as
    under a container's PID 1 that never does) keeps its start time, and is no live kit."""
    fields = stat_fields(pid, proc) if isinstance(ticks, int) else None  # read once: its start time and state
    if fields is None or len(fields) <= STARTTIME_FIELD:
        return False
    return fields[STARTTIME_FIELD] == str(ticks) and fields[0] not in ("Z", "X")


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
    """The record in ``path``, or None when it cannot be read or names no process group a server could lead
    (perhaps it is being written right now; group 0 or 1 would have ``kit clean`` signal every process)."""
    try:
        doc = loads(path.read_text())
        if int(doc["pgid"]) < 2:
            return None
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


def pid_namespace() -> str | None:
    """This process's PID namespace as the kernel names it (``pid:[<inode>]``, what /proc/self/ns/pid links to)."""
    return None if (ino := pid_namespace_inode()) is None else f"pid:[{ino}]"


def _lock_dir_here() -> str | None:
    with contextlib.suppress(GateFailed):  # an unsafe lock directory: no run could reserve there
        return os.path.realpath(runs_dir())
    return None


def maker(into: Maker | None = None) -> Maker:
    """This kit process as the maker of what it starts (written ``into`` a record, when given)."""
    m = Maker() if into is None else into
    m["kit_pid"], m["kit_start_ticks"] = os.getpid(), start_ticks(os.getpid())
    m["kit_pidns"], m["kit_lock_dir"] = pid_namespace(), _lock_dir_here()
    return m


def _live_maker(m: Maker, run_id: object, boot: object, started: str) -> RunOwner | None:
    """The kit process ``m`` names, when it is another one, alive (pid, start time, boot, not a zombie) and in this
    PID namespace, and its run lock is in another lock directory: where it is in this one, the lock is gone and
    the run has ended (its kit may live on: a library caller, a finishing report), so nothing of it is live."""
    here = _lock_dir_here()
    if m.get("kit_lock_dir") is not None and m.get("kit_lock_dir") == here:
        return None
    if m.get("kit_pidns") not in (None, pid_namespace()):
        return None
    owner = RunOwner(run_id=str(run_id or "?"), pid=m["kit_pid"], start_ticks=m.get("kit_start_ticks"), started=started,
                     boot_id=boot if isinstance(boot, str) else None, experiment="?", bundle="?", ports=[], gpus=[],
                     user="?", note="its run lock is not in this lock directory")
    return None if is_self(owner) or not owner_alive(owner) else owner


def other_live_owner(record: ServerRecord | None) -> RunOwner | None:
    """The live run of another kit process that owns the server of ``record`` (None: a leftover, or ours): by its
    run lock, or, where that lock is in another lock directory (KIT_LOCK_DIR), by the kit process the record names
    (``Maker``; records of older kits name no namespace nor lock directory)."""
    if record is None:
        return None
    owner = other_live_run(record.get("run_id"))
    kit_pid = record.get("kit_pid")
    if owner is not None or not isinstance(kit_pid, int):
        return owner
    m = Maker(kit_pid=kit_pid, kit_start_ticks=record.get("kit_start_ticks"), kit_pidns=record.get("kit_pidns"),
              kit_lock_dir=record.get("kit_lock_dir"))
    return _live_maker(m, record.get("run_id"), record.get("boot_id"), str(record["started"]))


# the labels of each container kit creates that name its maker (beside the cell's kit.* labels)
MAKER_LABELS = {"kit_pid": "kit.pid", "kit_start_ticks": "kit.start_ticks", "kit_pidns": "kit.pidns",
                "kit_lock_dir": "kit.lock_dir"}
BOOT_LABEL = "kit.boot"
RUN_LABEL = "kit.run"  # the run a server (container or process) belongs to
_DIGITS = re.compile(r"[0-9]{1,20}")


def maker_labels() -> dict[str, str]:
    """This kit process (``maker()``) and its boot as container labels; what cannot be read is left out."""
    found = {MAKER_LABELS[k]: str(v) for k, v in maker().items() if v is not None}
    return {**found, **({BOOT_LABEL: b} if (b := boot_id()) else {})}


def labelled_owner(labels: dict[str, str]) -> RunOwner | None:
    """The live run of another kit process that owns a container with these labels (None: a leftover, or ours):
    by its run lock (``kit.run``), or by the kit process its ``maker_labels`` name, all of them there and well
    formed (anything else proves nothing: the container is judged by its run lock alone)."""
    got = {k: v if isinstance(v := labels.get(label), str) else "" for k, label in MAKER_LABELS.items()}
    run = labels.get(RUN_LABEL)
    run_id = run if isinstance(run, str) and _RUN_ID.fullmatch(run) else None
    owner = other_live_run(run_id)
    boot = labels.get(BOOT_LABEL)
    if owner is not None or not (_DIGITS.fullmatch(got["kit_pid"]) and _DIGITS.fullmatch(got["kit_start_ticks"])
                                 and got["kit_pidns"] and got["kit_lock_dir"] and isinstance(boot, str) and boot):
        return owner
    m = Maker(kit_pid=int(got["kit_pid"]), kit_start_ticks=int(got["kit_start_ticks"]), kit_pidns=got["kit_pidns"],
              kit_lock_dir=got["kit_lock_dir"])
    return _live_maker(m, run_id, boot, "?")


def owner_text(owner: RunOwner) -> str:
    """``run ID (kit pid P, user U, experiment E, bundle B)``: whose a live server or reservation is."""
    if owner["run_id"] == "?":
        return f"a run of another kit process ({owner.get('note') or 'its run cannot be named'})"
    return (f"run {owner['run_id']} (kit pid {owner['pid']}, user {owner.get('user', '?')}, experiment "
            f"{owner['experiment']}, bundle {owner['bundle']})")
