"""Process groups: who is in one, and stopping one completely (SIGTERM, grace, SIGKILL, proof).

Servers, load drivers and leftovers are all stopped through ``stop_group``: one implementation of the
signal sequence and of the proof that nothing of the group is left.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kit.plumbing.poll import poll_until

PROC = Path("/proc")


def stat_fields(pid: int, proc: Path = PROC) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ... (None when gone)."""
    try:
        text = (proc / str(pid) / "stat").read_text(errors="replace")
    except OSError:
        return None
    if ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


STARTTIME_FIELD = 19  # index of /proc/PID/stat field 22 (starttime) in stat_fields()


def start_ticks(pid: int, proc: Path = PROC) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None when it is gone)."""
    fields = stat_fields(pid, proc)
    try:
        return int(fields[STARTTIME_FIELD]) if fields else None
    except (IndexError, ValueError):
        return None


def pid_namespace_inode() -> int | None:
    """This process's PID namespace, as the inode of /proc/self/ns/pid (None where it cannot be read): a pid and
    start time name one process only within it."""
    with contextlib.suppress(OSError):
        return os.stat(PROC / "self" / "ns" / "pid").st_ino
    return None


def group_members(pgid: int, proc: Path = PROC) -> list[int]:
    """Live (non-zombie) PIDs in process group ``pgid``.

    On the host's own /proc each PID's group is asked of the kernel first (getpgid: one system call, where reading
    its stat file costs an open, a read and a parse; kit asks this at every poll of a server's start and stop, on a
    machine with hundreds of processes), and only the group's members have their stat file read (zombie or not, and
    the group again); another ``proc`` (a test's) is read as files only."""
    members = []
    host = proc == PROC
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        pid = int(name)
        if host:
            try:
                if os.getpgid(pid) != pgid:
                    continue
            except ProcessLookupError:  # gone since the listing
                continue
            except OSError:  # not ours to ask: its stat file decides
                pass
        fields = stat_fields(pid, proc)
        if fields and len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(pid)
    return sorted(members)


def _server_group(pgid: int) -> int:
    """``pgid``, refused where it is no group a server could lead: ``killpg(1, sig)`` is ``kill(-1, sig)``, every
    process the caller may signal; ``killpg(0, sig)`` is the caller's own group. Servers lead their own (setsid)."""
    if pgid < 2:
        raise ValueError(f"process group {pgid} is never a server's: refusing to signal it")
    return pgid


def program_path(program: str) -> str:
    """The program a command names, as kit starts it: a path (``~`` expanded, a relative one from kit's directory,
    never from the server's own empty one) made absolute; a bare name as it is (looked up on the server's PATH)."""
    expanded = os.path.expanduser(program)
    return os.path.abspath(expanded) if "/" in expanded else program


def group_alive(pgid: int) -> bool:
    """True while any non-zombie process of the group lives (or we may not signal it)."""
    pgid = _server_group(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return group_members(pgid) != []


def signal_group(pgid: int, sig: signal.Signals) -> bool:
    """Send ``sig`` to the group; False when it is already gone."""
    pgid = _server_group(pgid)
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


@dataclass(frozen=True)
class GroupStop:
    """How a group ended: the last signal sent (None when it was already gone) and who is left."""

    signal: str | None
    left: list[int]


def stop_group(pgid: int, grace_s: float, *, kill_wait_s: float = 10.0, reap: object = None) -> GroupStop:
    """SIGTERM to the whole group, up to ``grace_s`` for it to go, then SIGKILL and up to ``kill_wait_s``
    for the kernel to reap it. ``reap`` is an optional zero-argument callable run on every poll (a
    ``Popen.poll`` so that our own child does not linger as a zombie). Never signals anything outside
    the group; returns who is left (empty when the group is gone)."""
    poll_reap = reap if callable(reap) else (lambda: None)

    def gone() -> bool:
        poll_reap()
        return not group_alive(pgid)

    if gone():
        return GroupStop(None, [])
    sent = "SIGTERM"
    signal_group(pgid, signal.SIGTERM)
    if not poll_until(gone, grace_s):
        sent = "SIGKILL"
        signal_group(pgid, signal.SIGKILL)
        poll_until(gone, kill_wait_s)
    with contextlib.suppress(ChildProcessError):
        poll_reap()
    return GroupStop(sent, group_members(pgid))


def _others_where(test: Callable[[Path], bool], proc: Path) -> list[int]:
    """PIDs (not this process) whose /proc entry passes ``test`` (one that vanishes or cannot be read does not)."""
    me, out = os.getpid(), []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        with contextlib.suppress(OSError):
            if test(entry):
                out.append(int(entry.name))
    return sorted(out)


def pipe_holders(inode: int, proc: Path = PROC) -> list[int]:
    """PIDs (not this process) that hold an end of the pipe ``inode`` open: a server's output pipe still held after
    its process group is gone means a process that left the group (setsid, a double fork) and lives on."""
    want = f"pipe:[{inode}]"
    return _others_where(lambda entry: any(os.readlink(fd) == want for fd in (entry / "fd").iterdir()), proc)


TAG_VAR = "KIT_SERVER_TAG"  # in every process-runtime server's environment: a token of its own (tagged)
MAX_ENVIRON_BYTES = 1 << 20  # of one process's /proc/PID/environ read to look for the tag


def tagged(tag: str, proc: Path = PROC, *, stop: bool = False) -> list[int]:
    """PIDs (not this process) whose environment holds ``TAG_VAR=tag``: what a server started, wherever it went
    (a daemon that double-forked, setsid and closed its output keeps the environment it inherited). ``stop``: each
    is sent SIGSTOP the moment it is found (a process that keeps forking away is frozen before its next fork)."""
    want = f"{TAG_VAR}={tag}".encode()

    def holds(entry: Path) -> bool:
        with open(entry / "environ", "rb") as f:
            found = want in f.read(MAX_ENVIRON_BYTES).split(b"\0")
        if found and stop:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGSTOP)
        return found

    return _others_where(holds, proc)


MAX_DESCENDANTS = 100_000  # processes followed below one PID (bounded, whatever /proc shows)


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """Live (non-zombie) PIDs below ``pid`` by parent links (its children, theirs, ...), from one scan of /proc:
    what a server's leader started, wherever its group or session went, while the leader lives (it is their
    subreaper: an orphan among them is reparented to it, not to init; ``ProcessRuntime``)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir(proc):
        fields = stat_fields(int(name), proc) if name.isdigit() else None
        if fields and len(fields) > 1 and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found: set[int] = set()
    todo = [pid]
    while todo and len(found) < MAX_DESCENDANTS:
        for child in children.get(todo.pop(), []):
            if child not in found and child != pid:
                found.add(child)
                todo.append(child)
    return sorted(found)


def stop_pids(pids: list[int], grace_s: float) -> list[int]:
    """SIGTERM each of ``pids``, up to ``grace_s`` for them to go, then SIGKILL; those still alive after 5 s more."""
    def alive() -> list[int]:
        return [p for p in pids if (f := stat_fields(p)) is not None and f[0] != "Z"]

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for p in alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        if poll_until(lambda: not alive(), wait):
            break
    return alive()
