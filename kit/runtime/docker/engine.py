"""The Docker SDK adapter: the client, the engine's facts, and removing a container for sure.

Everything that touches docker-py for containers lives in ``kit.runtime.docker``; ``kit.images`` and
``kit.cleanup`` get their client from ``connect``.
"""

from __future__ import annotations

import contextlib
from typing import Any, TypedDict

import docker
from docker.errors import APIError, NotFound

from kit.errors import KitError, ServerError
from kit.plumbing.dockerconn import docker_client
from kit.plumbing.poll import poll_until

MANAGED_LABEL = "kit.managed"
MANAGED_FILTER = f"{MANAGED_LABEL}=1"
LIVE_STATES = ("running", "paused", "restarting")
STATE_POLL_S = 0.05  # container state and removal polls


# --------------------------------------------------------------------------- the adapter


def connect(client: Any | None = None, *, error: type[KitError] = ServerError) -> Any:
    """``client``, or a new Docker SDK client (``kit.plumbing.dockerconn``); raise ``error`` if none answers."""
    return client if client is not None else docker_client(error=error)


def explanation(e: Exception) -> str:
    """The engine's own message for an SDK error (without docker-py's URL prefix)."""
    if isinstance(e, APIError) and e.explanation:
        return str(e.explanation)
    return str(e)


class EngineFacts(TypedDict):
    """The docker runtime's environment, as environment.json records it."""

    runtime: str
    engine_version: str | None
    api_version: str
    engine_api_version: str | None
    engine_min_api_version: str | None
    sdk_version: str
    base_url: str
    runtimes: list[str]
    default_runtime: str | None
    storage_driver: str | None
    image_store: str
    cgroup_version: str | None
    cgroup_driver: str | None
    operating_system: str | None
    kernel: str | None
    architecture: str | None
    cpus: int | None
    memory_bytes: int | None


def engine_facts(client: Any) -> EngineFacts:
    """Engine version, negotiated API version, runtimes, storage driver and where the client talks to."""
    version = client.version()
    info = client.info()
    driver_status = {str(k): str(v) for k, v in info.get("DriverStatus") or []}
    containerd_store = "io.containerd.snapshotter" in driver_status.get("driver-type", "")
    return EngineFacts(
        runtime="docker",
        engine_version=version.get("Version"),
        api_version=client.api.api_version,
        engine_api_version=version.get("ApiVersion"),
        engine_min_api_version=version.get("MinAPIVersion"),
        sdk_version=docker.__version__,
        base_url=client.api.base_url,
        runtimes=sorted(info.get("Runtimes") or {}),
        default_runtime=info.get("DefaultRuntime"),
        storage_driver=info.get("Driver"),
        image_store="containerd" if containerd_store else "classic",
        cgroup_version=info.get("CgroupVersion"),
        cgroup_driver=info.get("CgroupDriver"),
        operating_system=info.get("OperatingSystem"),
        kernel=info.get("KernelVersion"),
        architecture=info.get("Architecture"),
        cpus=info.get("NCPU"),
        memory_bytes=info.get("MemTotal"),
    )


def wait_gone(client: Any, container_id: str, timeout: float) -> bool:
    """Poll until the engine no longer knows ``container_id``."""

    def gone() -> bool:
        try:
            client.containers.get(container_id)
        except NotFound:
            return True
        return False

    return poll_until(gone, timeout, interval=STATE_POLL_S)


def remove_container(client: Any, container: Any) -> bool:
    """Force-remove (with anonymous volumes) and confirm; True when it is gone."""
    with contextlib.suppress(NotFound):
        container.remove(force=True, v=True)
    return wait_gone(client, container.id, 10.0)

