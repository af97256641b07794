"""Who a process is: name, command line, owner, process group (psutil), and container (its cgroup).

Used by the gates to name whatever holds a GPU or a port, and to say how to stop it. Process-group
membership is ``kit.plumbing.procs.group_members``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence, Set
from pathlib import Path
from typing import NotRequired, TypedDict

import psutil

from kit.plumbing.secretnames import mask_argv
from kit.runtime import records

PROC = Path("/proc")

# docker (cgroup v1: /docker/<id>; v2: docker-<id>.scope), containerd, CRI-O (cri-containerd-<id>, crio-<id>)
PROXY = "docker-proxy"  # dockerd's process holding a port a container publishes
_HOST_PORT = re.compile(r"(?:^|\s)-host-port\s+(\d{1,5})(?=\s|$)")
_CONTAINER_RE = re.compile(r"(docker|cri-containerd|containerd|crio|libpod)[-/:]([0-9a-f]{64})")


class ContainerRef(TypedDict):
    runtime: str  # docker, containerd, cri-containerd, crio, libpod
    id: str
    name: NotRequired[str]  # these two only where Docker was asked (kit.gates.behind)
    kit: NotRequired[bool]  # labelled by kit (kit.run): `kit clean` may remove it


class ProcInfo(TypedDict):
    """What the gates record about a process; ``visible`` is False when it is gone or in another PID
    namespace (then every other field but ``pid`` is None)."""

    pid: int
    visible: bool
    name: str | None
    cmdline: str | None
    user: str | None
    pgid: int | None
    container: ContainerRef | None


def container_of(pid: int, proc: Path = PROC) -> ContainerRef | None:
    """The container a process runs in, when its cgroup says so (psutil does not read cgroups)."""
    try:
        text = (proc / str(pid) / "cgroup").read_text(errors="replace")
    except OSError:
        return None
    match = _CONTAINER_RE.search(text)
    if match is None:
        return None
    return ContainerRef(runtime=match.group(1), id=match.group(2))


def _cmdline(p: psutil.Process) -> str | None:
    """Its command line, secret-named options' values masked (another user's ``--api-key`` never reaches a bundle)."""
    try:
        return mask_argv(p.cmdline()) or None
    except psutil.Error:  # a zombie has none; a process may end between two reads
        return None


def describe(pid: int, proc: Path = PROC) -> ProcInfo:
    """What the kernel says about ``pid`` (``proc`` is where container_of reads cgroups)."""
    info = ProcInfo(pid=pid, visible=False, name=None, cmdline=None, user=None, pgid=None, container=None)
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            name = p.name() or None
            user = p.username()
        pgid = os.getpgid(pid)
    except (psutil.Error, OSError):
        return info
    info.update({"visible": True, "name": name, "cmdline": _cmdline(p), "user": user, "pgid": pgid,
                 "container": container_of(pid, proc)})
    return info


def short(info: ProcInfo) -> str:
    """``PID 123 python (user root, pgid 120, container 0a1b2c3d4e5f)``."""
    if not info.get("visible"):
        return f"PID {info['pid']} (not visible in /proc: gone, or in another PID namespace)"
    extras = [f"user {info['user']}", f"pgid {info['pgid']}"]
    container = info.get("container")
    if container:
        named = f" {container['name']}" if container.get("name") else ""
        whose = "publishing a port of " if info.get("name") == PROXY else ""
        extras.append(f"{whose}{container['runtime']} container {container['id'][:12]}{named}")
    return f"PID {info['pid']} {info['name']} ({', '.join(extras)})"


def fix_commands(infos: Sequence[ProcInfo], recorded: Set[int] = frozenset()) -> list[str]:
    """Commands that stop these processes: the container, or the whole process group.

    A group is stopped whole only where that cannot reach past what holds the resource: its leader is listed (a
    server and the workers it started) or gone (orphans of a killed job: the group is theirs), or kit recorded
    starting it (``recorded``). A process whose group has another live leader is named by PID alone: that group is
    someone else's (the shell script that started it in the background, whose `kill -- -PGID` would end the script,
    or the user's terminal), as is kit's own group and init's (group 1: ``kill -- -1`` signals every process). A
    ``docker-proxy`` kit.gates.behind could not tie to its container is named by the port it publishes: its process
    group is dockerd's.
    """
    containers: list[str] = []
    groups: list[str] = []
    pids: list[str] = []
    proxied: list[str] = []
    own = os.getpgrp()
    whole = {i.get("pgid") for i in infos if i.get("pgid") == i["pid"]} | set(recorded)  # a leader listed, or kit's
    whole |= {g for i in infos if (g := i.get("pgid")) and not psutil.pid_exists(g)}  # a leader gone
    for info in infos:
        container, pgid = info.get("container"), info.get("pgid")
        if container:
            if container["id"][:12] not in containers:
                containers.append(container["id"][:12])
        elif (port := proxy_port(info)) is not None:
            if str(port) not in proxied:
                proxied.append(str(port))
        elif pgid and pgid > 1 and pgid != own and pgid in whole:
            if f"-{pgid}" not in groups:
                groups.append(f"-{pgid}")
        elif info.get("visible"):
            pids.append(str(info["pid"]))
    out = []
    if containers:
        out.append(f"docker rm -f {' '.join(containers)}")
    out += [f"docker rm -f $(docker ps -q --filter publish={port})" for port in proxied]
    if groups:
        out.append(f"kill -TERM -- {' '.join(groups)}")
    if pids:
        out.append(f"kill -TERM {' '.join(pids)}")
    return out


def proxy_port(info: ProcInfo) -> int | None:
    """The host port a ``docker-proxy`` publishes (None for any other process)."""
    match = _HOST_PORT.search(info.get("cmdline") or "") if info.get("name") == PROXY else None
    port = int(match.group(1)) if match else 0
    return port if 0 < port < 65536 else None


def fix_text(infos: Sequence[ProcInfo]) -> str:
    """How to free what ``infos`` hold: ``kit clean`` only where it may act (a server kit recorded, by its process
    group; a container kit labelled, or one not asked about; a process hidden in another PID namespace: kit's
    containers are labelled and removed by it), and the commands that stop them."""
    kits = _recorded_groups()
    cmds = fix_commands(infos, kits)
    ours = any(((c := i.get("container")) and c.get("kit", True)) or not i.get("visible")
               or (i.get("pgid") or 0) in kits for i in infos)
    if not cmds:
        return "kit clean" if ours or not infos else "stop it (it is no process kit started)"
    return ("kit clean, or " if ours else "") + " and ".join(cmds)


def _recorded_groups() -> set[int]:
    """The process groups of servers kit recorded and no other live kit owns: what `kit clean` stops."""
    out = set()
    for path in records.record_files():
        rec = records.read_record(path)
        if rec is not None:
            out.add(int(rec["pgid"]))
    return out
