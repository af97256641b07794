"""What kit left in Docker: live runs (to refuse a second run on the same GPUs or ports) and `kit clean`.

Every container kit creates carries ``kit.managed=1`` and ``kit.run``; every image it builds carries
``kit.managed=1`` (the local base image from scripts/build-base-image carries ``kit.base=1`` instead,
so ``clean(images=True)`` keeps it).

Nothing of a live run is touched: a container or server group whose run another kit process is running now
(``kit.runtime.records.live_owner``: its run lock held, its kit the recorded process; or, its lock in another lock
directory, the live kit its labels or record name: ``labelled_owner``, ``other_live_owner``) is left alone and
listed with its owner (run id, kit pid); only the locks of runs whose kit is gone are removed.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from docker.errors import APIError, NotFound

from kit.errors import GateFailed, KitError
from kit.runtime.docker import LIVE_STATES, MANAGED_FILTER, connect, explanation, remove_container
from kit.runtime.leftovers import kill_leftover_groups
from kit.runtime.lockdir import entries
from kit.runtime.records import (
    RunOwner,
    labelled_owner,
    live_run_records,
    lock_held,
    owner_alive,
    owner_text,
    read_owner,
    runs_dir,
)


@dataclass(frozen=True)
class LiveRun:
    """A kit container that is running (or paused or restarting)."""

    run_id: str
    experiment: str
    arm: str
    cell: str
    container_id: str
    name: str
    status: str
    ports: list[tuple[str, int]]  # (host address, host port) published
    gpus: list[str] | str | None  # GPU UUIDs/indices, "all", or None
    owner: RunOwner | None = None  # the live run of another kit process it belongs to (None: its kit is gone)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        ports = ", ".join(f"{h}:{p}" for h, p in self.ports) or "no ports"
        return f"run {self.run_id} ({self.experiment} {self.cell}) container {self.name}: {ports}, GPUs {self.gpus}"


def _ports(attrs: dict[str, Any]) -> list[tuple[str, int]]:
    out = []
    for bindings in ((attrs.get("NetworkSettings") or {}).get("Ports") or {}).values():
        for b in bindings or []:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                out.append((str(b["HostIp"]), int(b["HostPort"])))
    return sorted(set(out))


def _gpus(attrs: dict[str, Any]) -> list[str] | str | None:
    ids: list[str] = []
    for req in (attrs.get("HostConfig") or {}).get("DeviceRequests") or []:
        if ["gpu"] not in (req.get("Capabilities") or []):
            continue
        if req.get("Count") == -1:
            return "all"
        ids += [str(d) for d in req.get("DeviceIDs") or []]
        if not req.get("DeviceIDs") and req.get("Count"):
            return "all"  # "any N GPUs": which ones is the driver's choice
    return ids or None


def live_runs(client: Any | None = None) -> list[LiveRun]:
    """Kit containers that are running, with their run id, published ports and GPUs."""
    client = connect(client, error=GateFailed)
    out = []
    for c in client.containers.list(filters={"label": MANAGED_FILTER}):
        attrs = c.attrs
        status = str((attrs.get("State") or {}).get("Status") or c.status)
        if status not in LIVE_STATES:
            continue
        labels = c.labels or {}
        out.append(LiveRun(
            run_id=labels.get("kit.run", "?"), experiment=labels.get("kit.experiment", "?"),
            arm=labels.get("kit.arm", "?"), cell=labels.get("kit.cell", "?"), container_id=c.id,
            name=c.name, status=status, ports=_ports(attrs), gpus=_gpus(attrs), owner=labelled_owner(dict(labels)),
        ))
    return out


def _gpus_overlap(a: list[str] | str | None, b: list[str] | str | None) -> bool:
    if not a or not b:
        return False
    if a == "all" or b == "all":
        return True
    return bool(set(a) & set(b))


def conflicting_runs(runs: Iterable[LiveRun], *, ports: Iterable[int], gpus: list[str] | str | None,
                     own_run: str | None = None) -> list[LiveRun]:
    """The live runs (other than ``own_run``) that hold one of ``ports`` or share a GPU with ``gpus``."""
    wanted = set(ports)
    return [
        r for r in runs
        if r.run_id != own_run and ({p for _, p in r.ports} & wanted or _gpus_overlap(r.gpus, gpus))
    ]


def refuse_live_runs(*, ports: Iterable[int], gpus: list[str] | str | None, own_run: str | None = None,
                     client: Any | None = None) -> None:
    """Raise GateFailed (exit 5) when another kit run's container holds these ports or GPUs."""
    found = conflicting_runs(live_runs(client), ports=ports, gpus=gpus, own_run=own_run)
    if found:
        lines = [f"  {r}" + (f", {owner_text(r.owner)}, still running" if r.owner else ", its kit is gone")
                 for r in found]
        live = any(r.owner for r in found)
        raise GateFailed(
            "another kit run holds the GPUs or ports this run needs:\n" + "\n".join(lines),
            hint="wait for it to finish, or choose other ports (`kit clean` leaves a live run alone)" if live
            else "its kit is gone: remove its containers with `kit clean`",
        )


def clean(images: bool = False, client: Any | None = None, *, run_id: str | None = None) -> dict[str, list[str]]:
    """Remove every kit container (any state, "created" leftovers included) and, with ``images``, every
    image labelled kit.managed=1. ``run_id`` limits it to one run's containers. Returns what went."""
    client = connect(client)
    filters = [MANAGED_FILTER] + ([f"kit.run={run_id}"] if run_id else [])
    removed: list[str] = []
    kept: list[str] = []
    for c in client.containers.list(all=True, filters={"label": filters}):
        desc = f"{c.name} ({c.short_id}, {c.status})"
        if (owner := labelled_owner(dict(c.labels or {}))) is not None:
            kept.append(f"{desc}: {owner_text(owner)}, still running")
        elif remove_container(client, c):
            removed.append(desc)
    out: dict[str, list[str]] = {"containers": removed}
    if kept:
        out["live_run_containers_left_alone"] = kept
    if images:
        out["images"], kept = remove_images(client)
        if kept:
            out["images_kept"] = kept
    return out


def remove_images(client: Any, labels: list[str] | None = None) -> tuple[list[str], list[str]]:
    """Remove kit images (also carrying ``labels``), children before parents: a parent with children
    refuses to go. Returns (removed, kept with the engine's reason)."""
    found = client.images.list(filters={"label": [MANAGED_FILTER, *(labels or [])]})
    pending = {img.id: img for img in found}
    removed: list[str] = []
    errors: dict[str, str] = {}
    for _ in range(len(pending) + 1):
        progress = False
        for image_id, img in list(pending.items()):
            try:
                for name in img.tags or [image_id]:
                    client.images.remove(name)
            except NotFound:
                pass
            except APIError as e:
                errors[image_id] = explanation(e)
                continue
            removed.append(", ".join(img.tags) or image_id[:19])
            del pending[image_id]
            errors.pop(image_id, None)
            progress = True
        if not pending or not progress:
            break
    kept = [f"{', '.join(img.tags) or image_id[:19]}: {errors.get(image_id, '?')}" for image_id, img in pending.items()]
    return removed, kept


def clean_all(images: bool = False, client: Any | None = None) -> dict[str, list[str]]:
    """`kit clean`: kit containers (and images) when Docker answers, and process-runtime server groups."""
    try:
        out = clean(images=images, client=client)
    except KitError as e:  # the process-runtime leftovers below are cleaned all the same
        where = docker_expected()
        out = {"containers": [], "docker_unreachable" if where else "docker_skipped":
               [f"{where or 'no Docker configured here (no DOCKER_HOST, no ' + DEFAULT_SOCKET + ')'}: "
                f"{e.message.splitlines()[0]}"]}
    groups = kill_leftover_groups()  # leftovers only (records.py)
    out["server_process_groups"], out["stale_records"] = groups.stopped, groups.stale
    if groups.survived:
        out["server_process_groups_still_running"] = groups.survived
    kept = [f"group {r['pgid']} (cell {r.get('cell')}): {owner_text(o)}, still running"
            for _, r, o in live_run_records()]
    if kept:
        out["live_run_server_groups_left_alone"] = kept
    out["stale_run_locks"] = remove_stale_run_locks()
    return out


DEFAULT_SOCKET = "/var/run/docker.sock"


def docker_expected() -> str | None:
    """The Docker engine `kit clean` must look at: DOCKER_HOST when set, else the default socket where it exists;
    None on a host with neither, or where DOCKER_HOST names a unix socket path that does not exist (no engine, so
    no kit container, can be there: a process-runtime host). A socket that exists but does not answer, or a TCP
    engine that does not answer, is an engine kit could not look at."""
    if host := os.environ.get("DOCKER_HOST"):
        path = host.removeprefix("unix://") if host.startswith("unix://") else None
        return None if path is not None and not os.path.exists(path) else f"DOCKER_HOST={host}"
    return DEFAULT_SOCKET if os.path.exists(DEFAULT_SOCKET) else None


def raise_if_unchecked(result: dict[str, list[str]]) -> None:
    """After `kit clean` said what it did: GateFailed (exit 5, as the leftover gate when Docker does not answer)
    when a configured Docker engine did not answer, so its containers were never looked at; never "clean"."""
    if unreachable := result.get("docker_unreachable"):
        where = unreachable[0].partition(": ")[0]
        raise GateFailed(f"kit's containers were not checked: the Docker engine at {where} does not answer (the "
                         "process-runtime leftovers were cleaned)",
                         hint="start that engine (`./scripts/ensure-docker` on Debian), or set DOCKER_HOST to the "
                              "engine kit's containers run on (unset: the default socket), then `kit clean` again")


def remove_stale_run_locks() -> list[str]:
    """Remove the run locks (in the host-wide lock directory) of runs whose kit is gone: not held, not the recorded
    process. The port and GPU lock files stay: they are reused, and removing one a live kit has open would let two
    holders in. Another user's stale run lock in the sticky directory stays too (only its owner or root may remove
    it); it reserves nothing."""
    removed = []
    for path in entries(runs_dir(), "run-"):
        owner = read_owner(path)
        if lock_held(path) or (owner is not None and owner_alive(owner)):
            continue
        try:
            path.unlink(missing_ok=True)
        except OSError:
            continue
        removed.append(f"{path.name} (run {owner['run_id'] if owner else '?'}, its kit is gone)")
    return removed


def stop_run_leftovers(run_id: str, docker: bool) -> list[str]:
    """What a kit that died (SIGKILL, the OOM killer, power loss of its own process) left running, stopped by the
    resume of its bundle before the gates run: the same run id, and the bundle's lock held by this process, prove
    that no live kit owns them. Servers of any other run are never touched (the leftover gate names them); a group
    that outlives SIGKILL keeps its record, and the leftover gate fails naming it. ``docker``: also the containers
    labelled with this run id (Docker not reachable: the leftover gate says so). The load drivers need nothing:
    they leave on their own when their parent goes. Returns what was stopped."""
    stopped = kill_leftover_groups(run_id=run_id).stopped
    if docker:
        with contextlib.suppress(KitError):
            stopped += [f"container {c}" for c in clean(run_id=run_id)["containers"]]
    return stopped
