"""The docker runtime: a server as a container through the Docker SDK.

    engine  the SDK adapter: client, engine facts, confirmed removal, the ``kit.managed`` label
    config  ``ServerSpec`` -> container settings (GPUs, ulimits, ports, labels), redaction
    server  the running container (``DockerServer``) and the ``Runtime`` (``DockerRuntime``)

Every public name is importable from ``kit.runtime.docker``.
"""

from kit.runtime.docker.config import (
    DEFAULT_ULIMITS,
    EXTRA_KEYS,
    ContainerConfig,
    container_config,
    failure_hint,
    gpu_config,
    redact_inspect,
    ulimit_config,
)
from kit.runtime.docker.engine import (
    LIVE_STATES,
    MANAGED_FILTER,
    MANAGED_LABEL,
    STATE_POLL_S,
    EngineFacts,
    connect,
    engine_facts,
    explanation,
    remove_container,
    wait_gone,
)
from kit.runtime.docker.server import (
    READY_BACKOFF,
    READY_FIRST_S,
    READY_MAX_S,
    ContainerExited,
    DockerRuntime,
    DockerServer,
)

__all__ = [
    "DEFAULT_ULIMITS",
    "EXTRA_KEYS",
    "LIVE_STATES",
    "MANAGED_FILTER",
    "MANAGED_LABEL",
    "READY_BACKOFF",
    "READY_FIRST_S",
    "READY_MAX_S",
    "STATE_POLL_S",
    "ContainerConfig",
    "ContainerExited",
    "DockerRuntime",
    "DockerServer",
    "EngineFacts",
    "connect",
    "container_config",
    "engine_facts",
    "explanation",
    "failure_hint",
    "gpu_config",
    "redact_inspect",
    "remove_container",
    "ulimit_config",
    "wait_gone",
]
