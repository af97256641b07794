"""A cgroup (v2) of its own for each process-runtime server: what the server starts stays in it through setsid, a
double fork, closed output, a scrubbed environment and its leader exiting first; the kernel lists it
(``cgroup.procs``, of it and of any cgroup the server made below it: no PID guessed from parent links or reused by
another process), and one write ends all of it (``cgroup.kill``, Linux 5.14+). It contains what a server does by
accident or by habit (daemons), not a server bent on escaping: one that may write to a ``cgroup.procs`` above its
own (root, or the user owning a delegated subtree) can move itself out, and is then found only by the process
runtime's other means (parent links, output pipe, environment tag).

Made as a child of kit's own cgroup (``/proc/self/cgroup``'s ``0::`` line) under the cgroup2 mount, named
``kit-<server>-<kit pid>.<start ticks>.<PID namespace>-<random>``, where kit may write there: root, or a subtree
delegated to the user (systemd ``Delegate=yes``, a ``systemd-run --user --scope``). Elsewhere (a read-only
/sys/fs/cgroup in a container, cgroup v1 only, an older kernel) none is made and the process runtime finds what
left the server's group as before, by its parent links, its output pipe and its environment's tag
(``kit.runtime.process``); the server's description says which, and why. ``KIT_CGROUP=0`` (0/false/no/off) never
makes one.

The server joins before its command runs: kit's start shim writes ``0`` into the cgroup's ``cgroup.procs``
(an open file it is handed) before its exec, so nothing it starts is ever outside.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import signal
from dataclasses import dataclass
from pathlib import Path

from kit.plumbing.poll import poll_until
from kit.plumbing.procs import pid_namespace_inode, start_ticks

ENV = "KIT_CGROUP"
PREFIX = "kit-"
# as ``create`` names them: kit-<server>-<kit's pid>.<its start time in ticks>.<its PID namespace's inode>-<random>
# (the namespace absent in the names of older kits); only such are ever touched
NAME = re.compile(r"kit-[A-Za-z0-9._-]{1,64}-(?P<pid>[0-9]{1,10})\.(?P<ticks>[0-9]{1,20})(?:\.(?P<ns>[0-9]{1,20}))?"
                  r"-[0-9a-f]{16}")
MAX_PROC_FILE = 1 << 20  # bytes read of /proc/self/mountinfo, /proc/self/cgroup, a cgroup's procs or events
MAX_PROCS = 100_000  # PIDs taken from one cgroup and the cgroups below it
MAX_TREE = 1_000  # cgroups followed below one server's (a server may make its own)


def wanted() -> bool:
    """False when ``KIT_CGROUP`` turns containment off (0, false, no, off)."""
    return os.environ.get(ENV, "").strip().lower() not in ("0", "false", "no", "off")


def _read(path: Path) -> str:
    """A kernel file's text, its first MAX_PROC_FILE bytes (OSError when it cannot be read)."""
    with open(path, "rb") as f:
        return f.read(MAX_PROC_FILE).decode("utf-8", "replace")


@functools.cache
def mount_point() -> Path | None:
    """Where the cgroup2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host): read
    once per process (every ``Cgroup.has`` asks, once per PID signalled)."""
    with contextlib.suppress(OSError):
        for line in _read(Path("/proc/self/mountinfo")).splitlines():
            left, _, right = line.partition(" - ")
            if right.split(" ", 1)[0] == "cgroup2" and len(fields := left.split()) > 4:
                return Path(fields[4].replace("\\040", " "))
    return None


def own_path() -> str | None:
    """This process's cgroup v2 path (``/`` in a host's root cgroup), None without a cgroup2 line."""
    with contextlib.suppress(OSError):
        for line in _read(Path("/proc/self/cgroup")).splitlines():
            if line.startswith("0::"):
                return line[3:]
    return None


def own_dir() -> Path | None:
    """This process's cgroup as a directory of the cgroup2 mount (None without either): where kit makes its own."""
    mount, own = mount_point(), own_path()
    return None if mount is None or own is None else mount / own.lstrip("/")


@dataclass(frozen=True)
class Cgroup:
    """One server's cgroup (a directory of the cgroup2 hierarchy)."""

    path: Path

    @classmethod
    def create(cls, server: str) -> tuple[Cgroup | None, str]:
        """A new empty cgroup for ``server``, below kit's own, or None and why none could be made."""
        if not wanted():
            return None, f"{ENV}={os.environ.get(ENV)}"
        here = own_dir()
        if here is None:
            return None, "no cgroup v2 hierarchy mounted"
        label = re.sub(r"[^A-Za-z0-9._-]", "_", server.removeprefix(PREFIX))[:64] or "server"
        me = os.getpid()
        ns = pid_namespace_inode()
        name = f"{PREFIX}{label}-{me}.{start_ticks(me) or 0}{'' if ns is None else f'.{ns}'}-{secrets.token_hex(8)}"
        path = here / name
        try:
            path.mkdir(mode=0o755)
        except OSError as e:
            return None, f"cannot make {path}: {e.strerror or e}"
        group = cls(path)
        if not (path / "cgroup.kill").exists():
            group.remove()
            return None, "this kernel's cgroups have no cgroup.kill (Linux 5.14 or later)"
        return group, ""

    @classmethod
    def recorded(cls, path: object, maker: tuple[object, object]) -> Cgroup | None:
        """The cgroup a server record names, only when it is one kit makes (a ``kit-<server>-<pid>.<ticks>-<hex>``
        directory under the cgroup2 mount, not a link) and the record's kit (``maker``: its PID and start time)
        made it: a record never leads kit to signal any other cgroup, another kit's included."""
        mount = mount_point()
        if not isinstance(path, str) or mount is None or len(path) > 4096:
            return None
        try:
            p = Path(path)
            if NAME.fullmatch(p.name) is None or ".." in p.parts or not p.is_relative_to(mount) or p.is_symlink():
                return None
            group = cls(p)
            return group if group.maker == maker and p.is_dir() else None
        except (OSError, ValueError):
            return None

    @property
    def maker(self) -> tuple[int, int]:
        """The kit process that made it: its PID and start time (clock ticks since boot), from its name."""
        m = NAME.fullmatch(self.path.name)
        return (int(m["pid"]), int(m["ticks"])) if m else (0, 0)

    @property
    def maker_namespace(self) -> int | None:
        """The inode of its kit's PID namespace, from its name (None in the names of older kits): where it is not
        the reader's, the pid and start time name some other process here."""
        m = NAME.fullmatch(self.path.name)
        return int(m["ns"]) if m and m["ns"] else None

    def join_file(self) -> int:
        """An open write end of ``cgroup.procs``: writing ``0`` to it moves the writer in (the start shim's)."""
        return os.open(self.path / "cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)

    def tree(self) -> list[Path]:
        """It and the cgroups below it (a server may make its own), parents first; [] when it is gone."""
        found: list[Path] = []
        todo = [self.path]
        while todo and len(found) < MAX_TREE:
            here = todo.pop(0)
            found.append(here)
            with contextlib.suppress(OSError), os.scandir(here) as entries:
                todo += sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))
        return found if self.path.is_dir() else []

    def procs(self) -> list[int]:
        """The live processes in it and below it (the kernel's lists: zombies are not in them), [] when gone."""
        pids: set[int] = set()
        for here in self.tree():
            with contextlib.suppress(OSError):
                pids |= {int(p) for p in _read(here / "cgroup.procs").split()[:MAX_PROCS] if p.isdigit()}
            if len(pids) >= MAX_PROCS:
                break
        return sorted(pids)

    def has(self, pid: int) -> bool:
        """Whether ``pid`` is in it (or below it) now."""
        with contextlib.suppress(OSError):
            mine = self.relative
            return any(line == f"0::{mine}" or line.startswith(f"0::{mine}/")
                       for line in _read(Path(f"/proc/{pid}/cgroup")).splitlines())
        return False

    @property
    def relative(self) -> str:
        mount = mount_point()
        return "/" + str(self.path.relative_to(mount)) if mount and self.path.is_relative_to(mount) else str(self.path)

    def populated(self) -> bool:
        """Whether any live process is in it or below it (``cgroup.events``; False when it is gone)."""
        try:
            return "populated 1" in _read(self.path / "cgroup.events").splitlines()
        except OSError:
            return False

    def signal_all(self, sig: signal.Signals) -> list[int]:
        """``sig`` to each process in it, each found in it again once a pidfd holds it (a PID that another
        process took meanwhile is never signalled); the PIDs signalled."""
        sent = []
        for pid in self.procs():
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if self.has(pid):
                    signal.pidfd_send_signal(fd, sig)
                    sent.append(pid)
            except OSError:
                pass
            finally:
                os.close(fd)
        return sent

    def kill(self, wait_s: float = 10.0) -> list[int]:
        """SIGKILL to everything in it, at once (what it forks meanwhile too); who is still in it after ``wait_s``."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        poll_until(lambda: not self.populated(), wait_s)
        return self.procs()

    def remove(self) -> bool:
        """Remove the (empty) directory and those below it, deepest first; True when it is gone."""
        for here in reversed(self.tree()):
            with contextlib.suppress(OSError):
                here.rmdir()
        return not self.path.exists()


def made_here() -> list[Cgroup]:
    """kit's cgroups directly below this process's own (where every kit in this cgroup makes them), sorted."""
    here = own_dir()
    if here is None:
        return []
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(here):
            if NAME.fullmatch(entry.name) and entry.is_dir(follow_symlinks=False):
                found.append(Cgroup(Path(entry.path)))
    return sorted(found, key=lambda c: c.path)
