"""Reservations: what lets two runs share a host. A run holds, for its whole length, an exclusive flock on
one lock file per port it uses (server.port, server.extra_ports, gates.ports) and per GPU (by NVML index,
as the GPU gate picks them: ``hardware.gpu_indices``, else the first ``hardware.gpus``), and on its run lock
(``kit.runtime.records``: who runs it, checked by pid and start time).
The locks go with the kit process, however it ends.

The lock files are host-wide (``kit.runtime.lockdir``: ``KIT_LOCK_DIR``, else ``/run/lock/kit``), shared by every
user: runs of two users, two HOMEs or a container sharing /run/lock reserve against each other.
Another run asking for a port or GPU already held is refused at once (exit 5) naming whose it is (run
id, kit pid, user, bundle); the port gate says the same before each start, so no run takes a port between
another's cells. ``hardware.gpus: all`` holds ``gpu-all`` exclusively; a run of N GPUs holds it shared,
so the two never meet. Port and GPU lock files are never removed (removing a lock file another process
has open would let two holders in); the run lock is removed when the run ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from kit.errors import GateFailed
from kit.manifest import Manifest
from kit.plumbing.clock import utc_now
from kit.plumbing.poll import poll_until
from kit.plumbing.procs import start_ticks
from kit.runtime.lockdir import FIX, LockFile, entries, lock_dir, open_lock, read_lock, user_name, write_info
from kit.runtime.records import (
    RunOwner,
    boot_id,
    is_self,
    live_owner,
    lock_held,
    owner_alive,
    owner_text,
    run_lock_path,
    runs_dir,
    unknown_owner,
)

SETTLE_S = 0.5  # another kit's liveness probe holds a lock for microseconds; a run holds it for hours


def ports_of(m: Manifest) -> list[int]:
    return sorted({m.server.port, *m.server.extra_ports, *m.gates.ports})


def gpus_of(m: Manifest) -> list[str]:
    """The GPU lock names a run of ``m`` holds exclusively (``all``, or the indices the GPU gate picks:
    hardware.gpu_indices, else the first hardware.gpus)."""
    gpus = m.hardware.gpus
    if gpus == "all":
        return ["all"]
    chosen = m.hardware.gpu_selection()
    return [str(i) for i in (chosen if chosen is not None else range(gpus))]


def resource_path(kind: str, name: str) -> Path:
    return runs_dir() / f"{kind}-{name}.lock"


_HELD_HERE: set[tuple[str, str]] = set()  # (kind, name) this process reserves now: never "another run's"


def holder(kind: str, name: str) -> RunOwner | None:
    """The live run of another kit process (any user) that holds this port or GPU now (None: free, or ours).

    The flock says whether it is held; who holds it is the live run whose lock claims it: the run the lock file
    names first, else any live run lock in the directory that lists it (the content may be stale or hostile)."""
    path = resource_path(kind, name)
    if (kind, name) in _HELD_HERE or not lock_held(path):
        return None
    named = _named_run(path)
    for run_id in dict.fromkeys([*([named] if named else []), *_run_ids()]):
        owner = live_owner(run_id)
        if owner is not None and _claims(owner, kind, name):
            return None if is_self(owner) else owner
    return unknown_owner(f"which run holds {path} cannot be read from the host's run locks; perhaps a run of "
                         "another user whose kit could not write it")


def _named_run(path: Path) -> str | None:
    text = (read_lock(path) or (None, 0))[0]
    return text.strip() if text else None


def _run_ids() -> list[str]:
    return [p.name[len("run-"):-len(".lock")] for p in entries(runs_dir(), "run-")]


def _claims(owner: RunOwner, kind: str, name: str) -> bool:
    if kind == "port":
        return name.isdigit() and int(name) in owner["ports"]
    return name in owner["gpus"] or (name == "all" and bool(owner["gpus"]))


def live_runs() -> list[RunOwner]:
    """The live runs of other kit processes (any user) in the host-wide lock directory."""
    return [o for run_id in _run_ids() if (o := live_owner(run_id)) is not None and not is_self(o)]


def runs_of(pids: list[int]) -> dict[int, RunOwner]:
    """Of ``pids``, those a live run of another kit process started (its kit is an ancestor, same start time):
    its server on a port or GPU it did not reserve is that run's too, never a leftover to kill. Only processes in
    this PID namespace can be told."""
    runs = {o["pid"]: o for o in live_runs() if owner_alive(o)} if pids else {}
    out: dict[int, RunOwner] = {}
    for pid in pids if runs else []:
        try:
            ancestors = [p.pid for p in psutil.Process(pid).parents()]
        except psutil.Error:
            continue
        if (kit := next((a for a in ancestors if a in runs), None)) is not None:
            out[pid] = runs[kit]
    return out


def port_holders(ports: list[int]) -> dict[int, RunOwner]:
    """Of ``ports``, those another live kit run holds, with its owner."""
    return {p: o for p in ports if (o := holder("port", str(p))) is not None}


@dataclass
class Reservation:
    """The locks one run holds; ``release`` lets them go (idempotent)."""

    run_id: str
    fds: list[int] = field(default_factory=list)
    run_lock: Path | None = None
    names: list[tuple[str, str]] = field(default_factory=list)

    def release(self) -> None:
        if self.run_lock is not None:
            with contextlib.suppress(OSError):  # another user's stale file in a sticky directory: it stays
                self.run_lock.unlink(missing_ok=True)  # while still held: nobody can take it half-removed
            self.run_lock = None
        while self.names:
            _HELD_HERE.discard(self.names.pop())
        while self.fds:
            os.close(self.fds.pop())


def _take(path: Path, mode: int, perm: int = 0o666) -> LockFile | None:
    """A lock file holding ``mode`` on ``path`` (created if need be), or None when another holder keeps it past
    ``SETTLE_S``. A file removed (a run lock released) between the open and the flock is opened again: a lock on
    a name no longer in the directory reserves nothing."""
    for _ in range(8):
        lock = open_lock(path, create=True, mode=perm)
        assert lock is not None

        def locked(fd: int = lock.fd) -> bool:
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        if not poll_until(locked, SETTLE_S, interval=0.01):
            os.close(lock.fd)
            return None
        try:
            same = os.stat(lock.fd).st_ino == os.lstat(path).st_ino
        except OSError:
            same = False
        if same:
            return lock
        os.close(lock.fd)
    raise GateFailed(f"the lock file {path} keeps being replaced", hint=f"try again, {FIX}")


def _refuse(what: str, owner: RunOwner | None) -> GateFailed:
    whose = owner_text(owner) if owner is not None else "a run of another kit process"
    return GateFailed(f"{what} is reserved by {whose}, which is still running",
                      hint="wait for that run to finish, or give this manifest other ports (server.port) or run it on "
                           "another host; `kit clean` leaves a live run alone")


def _gpu_holders(exclude: str) -> RunOwner | None:
    return next((o for name in ("all", *map(str, range(64))) if (o := holder("gpu", name)) is not None
                 and o["run_id"] != exclude), None)


def _own_run_lock(path: Path, run_id: str, lock: LockFile | None) -> LockFile:
    """The run lock, held and this process's own. A resume of a bundle whose kit died can find that kit's file:
    held now (so that kit is gone), but owned by the user who ran it (the kernel's word, which ``read_owner``
    names) and, where this user may not write it, still holding the dead kit's record. Such a file is replaced
    while held (a new file, this user's, whose record names this process); where this user may not remove it
    either (another user's in the sticky directory), GateFailed (exit 5): a run named by a dead kit's record
    would look gone to every other kit, whose gates and `kit clean` would then treat its servers as leftovers."""
    if lock is None:
        raise _refuse(f"run {run_id}", live_owner(run_id))
    if lock.uid == os.geteuid() and lock.writable:
        return lock
    try:
        path.unlink()
    except OSError as e:
        os.close(lock.fd)
        who = user_name(lock.uid)
        raise GateFailed(f"run {run_id}'s lock file {path} is left by a kit of user {who} that is gone, and this user "
                         f"cannot replace it ({e.strerror})", hint=f"have {who} or root run `kit clean` (it removes "
                         f"stale run locks), then resume again; {FIX}") from None
    os.close(lock.fd)
    return _own_run_lock(path, run_id, _take(path, fcntl.LOCK_EX, 0o644))


def reserve(m: Manifest, run_id: str, bundle: Path) -> Reservation:
    """Take this run's lock, then its ports and GPUs, in the host-wide lock directory; GateFailed (exit 5)
    naming the holder when another live run (of any user) has one of them (nothing stays taken then)."""
    lock_dir()  # created (mode 1777) and checked
    r = Reservation(run_id)
    try:
        path = run_lock_path(run_id)
        lock = _own_run_lock(path, run_id, _take(path, fcntl.LOCK_EX, 0o644))  # only its kit writes who runs it
        r.fds.append(lock.fd)
        r.run_lock = path
        owner = RunOwner(run_id=run_id, pid=os.getpid(), start_ticks=start_ticks(os.getpid()), boot_id=boot_id(),
                         experiment=m.name, bundle=str(bundle), started=utc_now(), ports=ports_of(m),
                         gpus=gpus_of(m))
        write_info(lock, json.dumps(owner))
        for port in ports_of(m):
            _hold(r, "port", str(port), fcntl.LOCK_EX, f"port {port}")
        gpus = gpus_of(m)
        if gpus:
            _hold(r, "gpu", "all", fcntl.LOCK_EX if gpus == ["all"] else fcntl.LOCK_SH, "the GPUs")
            for name in (g for g in gpus if g != "all"):
                _hold(r, "gpu", name, fcntl.LOCK_EX, f"GPU {name}")
    except BaseException:
        r.release()
        raise
    return r


def _hold(r: Reservation, kind: str, name: str, mode: int, what: str) -> None:
    lock = _take(resource_path(kind, name), mode)
    if lock is None:
        raise _refuse(what, holder(kind, name) or (_gpu_holders(r.run_id) if kind == "gpu" else None))
    r.fds.append(lock.fd)
    if mode == fcntl.LOCK_EX:
        r.names.append((kind, name))
        _HELD_HERE.add((kind, name))
        write_info(lock, r.run_id)


@contextmanager
def reserved(m: Manifest, run_id: str, bundle: Path) -> Iterator[Reservation]:
    """``reserve`` for the length of a ``with`` block."""
    r = reserve(m, run_id, bundle)
    try:
        yield r
    finally:
        r.release()
