"""The container behind a process a gate found holding a GPU or a port, and whose run it is (asked of Docker, bounded).

A container's process names its container in its cgroup (``procinfo.container_of``). A port a container publishes
is held on the host by ``docker-proxy``, a child of dockerd in dockerd's own process group: killing that group would
stop Docker itself, so the proxy is named by the container whose port it publishes. A container labelled by a live
run of another kit process (in any lock directory: ``labelled_owner``) is that run's server, never a leftover: the
gates then say "wait for that run", not ``docker rm -f``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from kit.errors import GateFailed
from kit.gates.procinfo import ContainerRef, ProcInfo, proxy_port
from kit.gates.reserve import runs_of
from kit.plumbing.dockerconn import ask_docker
from kit.runtime.records import RUN_LABEL, RunOwner, labelled_owner

MAX_LOOKUPS = 32  # distinct containers asked about in one gate (a GPU rarely has more holders)
LOOKUP_S = 20.0  # and for at most this long in all (each Docker call has its own 10 s timeout besides)


def live_servers(infos: Sequence[ProcInfo]) -> dict[int, RunOwner]:
    """Of these processes, by PID, the servers of live runs of other kit processes (any user), never to be killed:
    what such a kit started in this lock directory (``reserve.runs_of``) and containers any kit labelled (``resolve``,
    which names the container behind each process in place)."""
    return runs_of([i["pid"] for i in infos]) | resolve(infos)


def resolve(infos: Sequence[ProcInfo], client: Any | None = None) -> dict[int, RunOwner]:
    """Name the container behind each process in ``infos`` (in place: its ``container``, with the container's
    ``name`` and whether kit labelled it) and return, by PID, the live runs of other kit processes whose containers
    these are. Docker not answering leaves ``infos`` as they were (the fix then names ``docker ps``)."""
    wanted = [i for i in infos if i.get("visible") and (_docker_id(i) or proxy_port(i))]
    if not wanted:
        return {}
    # Docker not reachable or answering oddly: nothing named (the hints fall back to docker ps)
    found, _ = ask_docker(lambda c: _resolve(wanted, c), client, error=GateFailed)
    return found or {}


def _resolve(infos: list[ProcInfo], client: Any) -> dict[int, RunOwner]:
    seen: dict[str, tuple[ContainerRef, RunOwner | None] | None] = {}
    out: dict[int, RunOwner] = {}
    deadline = time.monotonic() + LOOKUP_S
    for info in infos:
        key = _docker_id(info) or f"port:{proxy_port(info)}"
        if key not in seen:
            more = len(seen) < MAX_LOOKUPS and time.monotonic() < deadline
            seen[key] = _lookup(client, info) if more else None
        found = seen[key]
        if found is None:
            continue
        info["container"], owner = found
        if owner is not None:
            out[info["pid"]] = owner
    return out


def _lookup(client: Any, info: ProcInfo) -> tuple[ContainerRef, RunOwner | None] | None:
    from docker.errors import NotFound

    cid = _docker_id(info)
    if cid:
        try:
            containers = [client.containers.get(cid)]
        except NotFound:  # gone since the cgroup was read
            return None
    else:
        containers = client.containers.list(filters={"publish": str(proxy_port(info))})
    if len(containers) != 1:  # none (gone), or a port two containers claim (udp/tcp): name none rather than guess
        return None
    c = containers[0]
    labels = {str(k): str(v) for k, v in dict(c.labels or {}).items()}
    ref = ContainerRef(runtime="docker", id=str(c.id), name=str(c.name), kit=RUN_LABEL in labels)
    return ref, labelled_owner(labels)


def _docker_id(info: ProcInfo) -> str | None:
    container = info.get("container")
    return container["id"] if container and container["runtime"] == "docker" else None
