"""The one way kit connects to a Docker engine (API version negotiated, answered a ping)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from kit.errors import KitError, ServerError

T = TypeVar("T")


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


def ask_docker(ask: Callable[[Any], T], client: Any | None = None, *, error: type[KitError] = ServerError,
               timeout: int = 10) -> tuple[T | None, str | None]:
    """``ask(client)`` of ``client``, or of a new one closed afterwards; ``(None, why)`` when the engine could not be
    asked (not reachable, or answering oddly), ``why`` in its own words."""
    own = client is None
    try:
        if client is None:
            client = docker_client(error=error, timeout=timeout)
        return ask(client), None
    except Exception as e:  # noqa: BLE001 - any failure here means "Docker could not be asked", reported as such
        return None, e.message if isinstance(e, KitError) else f"{type(e).__name__}: {e}"
    finally:
        if own and client is not None:
            client.close()
