"""The process runtime's start: the server's leader made the subreaper of everything it starts, and what left its
group found again by parent links (``kit.runtime.process`` stops it).

``spawn`` starts ``python -I -S -c SHIM`` with an empty environment; the shim reads the server's environment from
a memory file kit filled (never argv: it may hold secrets, and /proc shows argv to every user), calls
prctl(PR_SET_CHILD_SUBREAPER), which execve keeps, puts SIGPIPE and SIGXFSZ back to their defaults (Python's own
start ignores them, and an ignored signal stays ignored across exec), and execs the command with exactly that
environment in the same process: the PID, group, record and exit code are the command's, and every orphan below
it (a daemon that double-forked and called setsid) is reparented to it, not to init, while it lives. The shim's
own environment is empty, so nothing of the server's (LD_PRELOAD, LD_LIBRARY_PATH, PYTHON*, a C locale Python
would coerce) touches it or is changed by it. The exec's outcome comes back on a close-on-exec pipe, as in
``subprocess``: end of file means the command runs; an errno means it could not, raised here as OSError, as
``Popen`` of the bare command would. Not a ``preexec_fn``: that runs Python between fork and exec, which is not
safe in a process with threads (kit has).
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from kit.plumbing.cgroups import Cgroup
from kit.plumbing.poll import Deadline, poll_until
from kit.plumbing.procs import descendants, program_path, start_ticks, stop_pids
from kit.runtime.records import same_process

EXEC_WAIT_S = 10.0  # for the shim's exec of the command (about 20-70 ms): past it, the start goes on unconfirmed
SHIM = """\
import ctypes, os, signal, sys
err, envfd, cgfd = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
with os.fdopen(envfd, "rb") as f:
    env = dict(item.split(b"=", 1) for item in f.read().split(b"\\0") if b"=" in item)
if cgfd >= 0:
    try:
        os.write(cgfd, b"0")
    except OSError as e:
        os.write(err, b"C%d;" % e.errno)
    os.close(cgfd)
ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)
for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
os.set_inheritable(err, False)
try:
    os.execvpe(sys.argv[4], sys.argv[4:], env)
except OSError as e:
    os.write(err, str(e.errno).encode())
    os._exit(127)
"""


def _environment_file(env: Mapping[str, str]) -> int:
    """A memory file holding ``env`` as NUL-separated NAME=value, read from its start."""
    fd = os.memfd_create("kit-server-env")
    data = b"\0".join(os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def spawn(command: list[str], env: Mapping[str, str], join: int | None = None,
          **popen: Any) -> tuple[subprocess.Popen[bytes], int | None]:
    """``command`` started behind the shim with ``env`` (and ``popen``'s other Popen arguments), once its exec has
    happened (OSError, as Popen's, when it could not: the shim is reaped first). ``join``: an open write end of a
    cgroup's ``cgroup.procs`` (``kit.plumbing.cgroups``) the shim moves itself into before the exec; returned with
    the process: None when it joined (or none was given), else the errno of that write (it runs outside)."""
    command = [program_path(command[0]), *command[1:]]  # "./serve.sh" is kit's, not the server's empty directory's
    envfd = _environment_file(env)
    r, w = os.pipe()
    fds = (w, envfd) if join is None else (w, envfd, join)
    try:
        proc: subprocess.Popen[bytes] = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", SHIM, str(w), str(envfd), str(-1 if join is None else join), *command],
            env={}, pass_fds=fds, **popen)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
        os.close(envfd)
    try:
        said = _said(r)
    finally:
        os.close(r)
    failed: int | None = None  # the shim's write to cgroup.procs: its errno (0: unknown), None when it joined
    if said.startswith(b"C") and b";" in said:
        cg, _, said = said[1:].partition(b";")
        failed = int(cg) if cg.isdigit() else 0
    if said:
        proc.wait()
        code = int(said) if said.isdigit() else 0
        raise OSError(code, os.strerror(code) if code else f"the subreaper shim said {said[:32]!r}")
    return proc, failed


def _said(r: int, limit: int = 64) -> bytes:
    """What the shim wrote on its pipe up to the exec (end of file), at most ``limit`` bytes, EXEC_WAIT_S at most."""
    out = b""
    end = time.monotonic() + EXEC_WAIT_S
    while len(out) < limit:
        ready, _, _ = select.select([r], [], [], max(0.0, end - time.monotonic()))
        chunk = os.read(r, limit - len(out)) if ready else b""
        if not chunk:
            break
        out += chunk
    return out


def left_the_group(leader: int, pgid: int) -> list[tuple[int, int | None]]:
    """The processes below ``leader`` by parent links that are not in its group (setsid, a double fork), each
    with its start time: ``Adopted.still_there`` later keeps only those, never a process that reused a PID."""
    return [(p, start_ticks(p)) for p in descendants(leader) if _group_of(p) not in (pgid, None)]


def _group_of(pid: int) -> int | None:
    """``pid``'s process group (None when it is gone)."""
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


class Adopted:
    """What left a server's group below its leader by parent links, taken before the group is signalled and again
    (at most every ``every_s``) while the stop waits: a daemon that escapes in its SIGTERM handler is reparented
    to the leader, and to init once the leader is gone. Taken only while ``ours()`` says the leader is still the
    server's (unreaped, or of the recorded start time: its PID not another's), before and after each scan.
    ``watch`` is the stop's poll: it calls ``ours()`` every time (a ``Popen.poll`` there reaps the leader)."""

    def __init__(self, leader: int, pgid: int, ours: Callable[[], bool], every_s: float = 0.2) -> None:
        self.leader, self.pgid, self.ours, self.every_s = leader, pgid, ours, every_s
        self.last = -every_s
        self.seen: dict[int, int | None] = {}
        self.watch()

    def still_there(self) -> list[int]:
        """The PIDs taken that are still the processes taken (same start time)."""
        return [p for p, ticks in self.seen.items() if same_process(p, ticks)]

    def watch(self) -> None:
        now = time.monotonic()
        if self.ours() and now - self.last >= self.every_s:
            self.last = now
            found = left_the_group(self.leader, self.pgid)
            if self.ours():
                for pid, ticks in found:
                    self.seen.setdefault(pid, ticks)


def stop_escapes(pids: list[int], cgroup: Cgroup | None, grace_s: float) -> list[int]:
    """What left a server's group stopped: SIGTERM to all of them (those in its cgroup through it), up to
    ``grace_s``, then SIGKILL (the cgroup's at once, what it forked meanwhile too); who is left."""
    if cgroup is None:
        return stop_pids(pids, grace_s)
    deadline = Deadline.after(grace_s)
    cgroup.signal_all(signal.SIGTERM)
    left = stop_pids([p for p in pids if not cgroup.has(p)], grace_s)
    poll_until(lambda: not cgroup.populated(), deadline)
    return sorted(set(left) | set(cgroup.kill()))


RESCAN_S = 10.0  # at most this long rescanning for processes that fork away faster than one scan and kill
QUIET_SCANS = 5  # scans in a row that must find nothing: one can miss a process that forks away during it
QUIET_GAP_S = 0.02


def stop_rescanned(scan: Callable[[], list[int]], left: list[int]) -> tuple[list[int], list[int]]:
    """A process that keeps forking (each child moving on before a signal reaches the parent) outruns one scan and
    kill: it lived on, tagged, with no cgroup to hold it (found 2026-12-07). ``scan`` finds them again (and stops
    each on sight: ``tagged(..., stop=True)``), they are killed, and so on until QUIET_SCANS scans in a row find
    nothing new (a scan that lists /proc while the process forks away can miss it); returns who is left (the last
    scan's finds too when the time ran out) and every PID the rescans found."""
    found: list[int] = []
    deadline = Deadline.after(RESCAN_S)
    quiet = 0
    while quiet < QUIET_SCANS:
        more = [p for p in scan() if p not in left]
        if not more:
            quiet += 1
            time.sleep(QUIET_GAP_S)
            continue
        if deadline.passed():  # what this last scan froze is killed too, never left stopped
            return sorted(set(left) | set(stop_pids(more, 0.0))), [*found, *more]
        quiet = 0
        found += more
        left = sorted(set(left) | set(stop_pids(more, 0.0)))
    return left, found


def found_again(scan: Callable[[], list[int]]) -> list[int]:
    """What ``scan`` finds in up to QUIET_SCANS tries (one scan can miss a process that forks away during it): a
    server believed gone only when none finds anything."""
    for _ in range(QUIET_SCANS):
        if found := scan():
            return found
        time.sleep(QUIET_GAP_S)
    return []
