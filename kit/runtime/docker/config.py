"""A ``ServerSpec`` as Docker container settings: GPUs, ulimits, ports, labels, and what to redact.

``container_config`` is the single place that turns a spec into ``containers.create`` arguments; the
memlock/stack ulimits sglang wants are added when GPUs are requested (or ``spec.extra["ulimits"]`` says so). The
labels are the cell's ``kit.*``, ``kit.managed=1`` and the kit process that creates it (``records.maker_labels``:
pid, start time, PID namespace, lock directory, boot), so that its live run's container is never taken for a
leftover.
"""

from __future__ import annotations

from typing import TypedDict

from docker.types import DeviceRequest, Mount, Ulimit

from kit.errors import ServerError
from kit.plumbing.jsontypes import Json
from kit.runtime import (
    SECRET_NAME_RE,
    ServerSpec,
)
from kit.runtime.docker.engine import MANAGED_LABEL
from kit.runtime.docker.gpus import GpuArgs, gpu_args
from kit.runtime.records import maker_labels

DEFAULT_ULIMITS: dict[str, int] = {"memlock": -1, "stack": 64 * 1024 * 1024}
EXTRA_KEYS = frozenset({"ulimits", "mem_limit"})


# --------------------------------------------------------------------------- spec -> container config


def gpu_config(spec: ServerSpec) -> GpuArgs:
    """The container arguments that pass ``spec.gpus`` in ``spec.gpu_mode`` (``kit.runtime.docker.gpus``)."""
    return gpu_args(spec.gpu_mode, spec.gpus, spec.driver_dir)


def ulimit_config(extra: dict[str, object], gpus: list[str] | str | None) -> list[Ulimit]:
    """The ulimits sglang's GPU workers want (memlock unlimited, stack 64 MiB).

    ``extra["ulimits"]``: True applies them, False none, a {name: value} map those; absent means
    "with GPUs only": a CPU-only server does not need pinned memory, and some engines (this sandbox's
    dockerd among them) cannot raise RLIMIT_MEMLOCK at all.
    """
    setting = extra.get("ulimits", gpus is not None)
    if setting is False:
        return []
    limits = DEFAULT_ULIMITS if setting is True else setting
    if not isinstance(limits, dict):
        raise ServerError(f"extra['ulimits'] must be True, False or a {{name: value}} map, got {setting!r}")
    return [Ulimit(name=str(k), soft=int(v), hard=int(v)) for k, v in limits.items()]


class ContainerConfig(TypedDict, total=False):
    """Keyword arguments for ``client.containers.create``."""

    image: str
    command: list[str]
    name: str
    detach: bool
    labels: dict[str, str]
    environment: dict[str, str]
    ports: dict[str, tuple[str, int]]
    init: bool
    auto_remove: bool
    device_requests: list[DeviceRequest]
    devices: list[str]
    ulimits: list[Ulimit]
    ipc_mode: str
    shm_size: str
    mounts: list[Mount]
    mem_limit: object
    cpuset_cpus: str


def container_config(spec: ServerSpec) -> ContainerConfig:
    """Keyword arguments for ``client.containers.create`` (pure: no engine needed)."""
    if not spec.image:
        raise ServerError(f"{spec.name}: the docker runtime needs an image for arm {spec.arm!r}")
    unknown = set(spec.extra) - EXTRA_KEYS
    if unknown:
        raise ServerError(f"{spec.name}: unknown docker options {sorted(unknown)} (known: {sorted(EXTRA_KEYS)})")
    gpu = gpu_config(spec)
    given = {**spec.env, **spec.secret_env}
    gpu_env = dict(gpu.environment)
    if "LD_LIBRARY_PATH" in gpu_env and spec.env.get("LD_LIBRARY_PATH"):  # the manifest's first, then the driver
        gpu_env["LD_LIBRARY_PATH"] = f"{spec.env['LD_LIBRARY_PATH']}:{gpu_env['LD_LIBRARY_PATH']}"
    for name, value in gpu_env.items():
        if name in given and given[name] != value and name != "LD_LIBRARY_PATH":
            shown = "***" if name in spec.secret_env else given[name]
            raise ServerError(
                f"{spec.name}: {name}={shown!r} in the environment contradicts the GPUs requested "
                f"({spec.gpus!r}, mode {spec.gpu_mode}: {name}={value!r})",
                hint=f"leave {name} out of the manifest's env: kit sets it from the GPUs it assigns",
            )
    cport = spec.container_port or spec.port
    kwargs = ContainerConfig(
        image=spec.image,
        command=list(spec.command),
        name=spec.name,
        detach=True,
        labels={**spec.labels, **maker_labels(), MANAGED_LABEL: "1"},
        environment={**spec.env, **gpu_env, **spec.secret_env},
        ports={f"{cport}/tcp": (spec.host, spec.port)},
        init=True,
        auto_remove=False,
        device_requests=gpu.device_requests,
        ulimits=ulimit_config(spec.extra, spec.gpus),
    )
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"  # the host's /dev/shm; shm_size would be ignored
    elif spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if gpu.devices:
        kwargs["devices"] = gpu.devices
    mounts = list(gpu.mounts)
    if spec.model_mount is not None:
        src, dst = spec.model_mount
        mounts.append(Mount(target=dst, source=src, type="bind", read_only=True))
    if spec.dump_mount is not None:
        src, dst = spec.dump_mount
        mounts.append(Mount(target=dst, source=src, type="bind", read_only=False))
    if mounts:
        kwargs["mounts"] = mounts
    if spec.cpus:
        kwargs["cpuset_cpus"] = spec.cpus  # the container's cgroup cpuset (inspect: HostConfig.CpusetCpus)
    if "mem_limit" in spec.extra:
        kwargs["mem_limit"] = spec.extra["mem_limit"]
    return kwargs


def failure_hint(message: str, spec: ServerSpec) -> str:
    """What to do about an engine error from create or start."""
    m = message.lower()
    if "could not select device driver" in m:
        return (
            f"the server asks for GPUs ({spec.gpus!r}) but this Docker engine has no NVIDIA runtime: install "
            "the NVIDIA Container Toolkit, run `nvidia-ctk runtime configure --runtime=docker` and restart "
            "dockerd, or run on a GPU host"
        )
    if "address already in use" in m or "port is already allocated" in m:
        return (
            f"host port {spec.host}:{spec.port} is taken by another process: find it with "
            f"`ss -ltnp 'sport = :{spec.port}'`, run `kit clean` if a kit leftover holds it, or change server.port"
        )
    if "rlimit" in m:
        return (
            "the engine cannot apply the ulimits (memlock unlimited, stack 64 MiB) because its own hard limit is "
            "lower: give dockerd LimitMEMLOCK=infinity (systemd) or start it from a shell with `ulimit -l unlimited`"
            "; or turn them off with ServerSpec.extra['ulimits']=False (the default without GPUs)"
        )
    if "bind source path does not exist" in m or "no such file or directory" in m:
        return f"check the model directory (model.path) and the command: mount {spec.model_mount!r}"
    if "conflict" in m and "already in use" in m:
        return "a container of that name is left over from an earlier run: `kit clean` removes it"
    return "`kit clean` removes kit containers left over from earlier runs; `docker info` shows the engine's state"


def redact_inspect(value: Json, spec: ServerSpec) -> Json:
    """A copy of inspect output with secret env values and any secret text replaced by ***."""
    names = set(spec.secret_env)
    if isinstance(value, dict):
        out = {k: redact_inspect(v, spec) for k, v in value.items()}
        env = out.get("Env")
        if isinstance(env, list):
            out["Env"] = [_redact_env_item(item, names) for item in env]
        return out
    if isinstance(value, list):
        return [redact_inspect(v, spec) for v in value]
    if isinstance(value, str):
        return spec.redact(value)
    return value


def _redact_env_item(item: Json, names: set[str]) -> Json:
    if not isinstance(item, str) or "=" not in item:
        return item
    key, _, _ = item.partition("=")
    return f"{key}=***" if key in names or SECRET_NAME_RE.search(key) else item

