"""The one way kit connects to a Docker engine (API version negotiated, answered a ping)."""

from __future__ import annotations

from typing import Any

from kit.errors import KitError, ServerError


def docker_client(*, error: type[KitError] = ServerError, timeout: int = 60) -> Any:
    """A Docker SDK client for the engine that DOCKER_HOST (or the default socket) names; raises
    ``error`` with the fix when none answers. ``docker`` is imported here only: it is heavy, and the
    process runtime never needs it."""
    import docker
    import requests
    from docker.errors import DockerException

    try:
        client = docker.from_env(version="auto", timeout=timeout)
        client.ping()
    except (DockerException, requests.RequestException) as e:
        raise error(
            f"no Docker engine answers: {e}",
            hint="start one (`./scripts/ensure-docker` installs and starts dockerd on Debian), or set DOCKER_HOST",
        ) from None
    return client
