"""Who a process is, read from /proc: name, command line, owner, process group, container.

Used by the gates to name whatever holds a GPU or a port, and to say how to stop it.
"""

from __future__ import annotations

import os
import pwd
import re
from pathlib import Path
from typing import Any

PROC = Path("/proc")

# docker (cgroup v1: /docker/<id>; v2: docker-<id>.scope), containerd, CRI-O (cri-containerd-<id>, crio-<id>)
_CONTAINER_RE = re.compile(r"(docker|cri-containerd|containerd|crio|libpod)[-/:]([0-9a-f]{64})")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def container_of(pid: int, proc: Path = PROC) -> dict[str, str] | None:
    """The container a process runs in, when its cgroup says so: {"runtime", "id"}."""
    text = _read(proc / str(pid) / "cgroup")
    match = _CONTAINER_RE.search(text or "")
    if match is None:
        return None
    runtime = "docker" if match.group(1) == "docker" else match.group(1)
    return {"runtime": runtime, "id": match.group(2)}


def _owner(pid: int, proc: Path) -> str | None:
    for line in (_read(proc / str(pid) / "status") or "").splitlines():
        if line.startswith("Uid:"):
            uid = int(line.split()[1])
            try:
                return pwd.getpwuid(uid).pw_name
            except KeyError:
                return str(uid)
    return None


def _stat_fields(pid: int, proc: Path) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, ..."""
    text = _read(proc / str(pid) / "stat")
    if not text or ")" not in text:
        return None
    return text.rsplit(")", 1)[1].split()


def describe(pid: int, proc: Path = PROC) -> dict[str, Any]:
    """What /proc says about ``pid``; ``visible`` is False when it is gone or in another PID namespace."""
    info: dict[str, Any] = {"pid": pid, "visible": False, "name": None, "cmdline": None, "user": None,
                            "pgid": None, "container": None}
    stat = _stat_fields(pid, proc)
    if stat is None:
        return info
    raw = (_read(proc / str(pid) / "cmdline") or "").rstrip("\0")
    info.update(
        visible=True,
        name=(_read(proc / str(pid) / "comm") or "").strip() or None,
        cmdline=raw.replace("\0", " ") or None,
        user=_owner(pid, proc),
        pgid=int(stat[2]),
        container=container_of(pid, proc),
    )
    return info


def short(info: dict[str, Any]) -> str:
    """``PID 123 python (user root, pgid 120, container 0a1b2c3d4e5f)``."""
    if not info.get("visible"):
        return f"PID {info['pid']} (not visible in /proc: gone, or in another PID namespace)"
    extras = [f"user {info['user']}", f"pgid {info['pgid']}"]
    if info.get("container"):
        extras.append(f"{info['container']['runtime']} container {info['container']['id'][:12]}")
    return f"PID {info['pid']} {info['name']} ({', '.join(extras)})"


def fix_commands(infos: list[dict[str, Any]]) -> list[str]:
    """Commands that stop these processes: the container, or the whole process group.

    A process in kit's own process group is named by PID alone, so the hint never kills kit itself.
    """
    containers: list[str] = []
    groups: list[str] = []
    pids: list[str] = []
    own = os.getpgrp()
    for info in infos:
        if info.get("container"):
            cid = info["container"]["id"][:12]
            if cid not in containers:
                containers.append(cid)
        elif info.get("pgid") and info["pgid"] != own:
            if f"-{info['pgid']}" not in groups:
                groups.append(f"-{info['pgid']}")
        elif info.get("visible"):
            pids.append(str(info["pid"]))
    out = []
    if containers:
        out.append(f"docker rm -f {' '.join(containers)}")
    if groups:
        out.append(f"kill -TERM -- {' '.join(groups)}")
    if pids:
        out.append(f"kill -TERM {' '.join(pids)}")
    return out


def fix_text(infos: list[dict[str, Any]]) -> str:
    cmds = fix_commands(infos)
    return "kit clean" + (", or " + " and ".join(cmds) if cmds else "")


def group_members(pgid: int, proc: Path = PROC) -> list[int]:
    """Live (non-zombie) PIDs in process group ``pgid``."""
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat_fields(int(entry.name), proc)
        if stat and len(stat) > 2 and stat[0] != "Z" and int(stat[2]) == pgid:
            members.append(int(entry.name))
    return sorted(members)


def socket_owners(inodes: set[int], proc: Path = PROC) -> dict[int, list[int]]:
    """inode -> PIDs holding that socket, from /proc/*/fd (only processes we may inspect)."""
    wanted = {f"socket:[{i}]": i for i in inodes}
    owners: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = os.scandir(entry / "fd")
        except OSError:
            continue
        with fds:
            for fd in fds:
                try:
                    target = os.readlink(fd.path)
                except OSError:
                    continue
                if target in wanted and int(entry.name) not in owners.setdefault(wanted[target], []):
                    owners[wanted[target]].append(int(entry.name))
    return owners
