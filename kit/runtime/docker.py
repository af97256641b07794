"""The docker runtime: one arm's server as a container, through the Docker SDK.

Start: create, then start, a container labelled ``kit.managed=1`` plus the cell's ``kit.*`` labels,
with ``init=True`` (docker-init as PID 1 forwards signals and reaps), the port published on exactly
``spec.host:spec.port``, GPUs by device request, the model mounted read-only, and (with GPUs, or
when ``spec.extra["ulimits"]`` says so) the memlock/stack ulimits sglang wants. When create or start
fails, the created container is removed before ServerError is raised (a failed start leaves a
container in state "created" otherwise).
Ready: the readiness path is polled with backoff while a thread copies the container's output,
secrets redacted, to the cell's log; an exit during start-up fails at once with the exit code,
OOMKilled and the last log lines. Stop: SIGTERM, a grace period, SIGKILL, then the final state is
read, the container removed, and its absence confirmed. Containers are never ``auto_remove``:
their state is needed for the post-mortem.

Everything that touches docker-py for containers lives here; ``kit.images`` and ``kit.cleanup``
get their client from ``connect``.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any, TypedDict

import docker
import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound
from docker.types import DeviceRequest, Mount, Ulimit

from kit.errors import KitError, ServerError
from kit.plumbing.dockerconn import docker_client
from kit.plumbing.jsontypes import Json, JsonObject
from kit.plumbing.logpump import LogPump
from kit.plumbing.net import http_ok
from kit.plumbing.poll import Deadline, poll_until
from kit.runtime import (
    SECRET_NAME_RE,
    ContainerDescription,
    ContainerStopDetails,
    ServerSpec,
    StopInfo,
    tail_lines,
)

MANAGED_LABEL = "kit.managed"
MANAGED_FILTER = f"{MANAGED_LABEL}=1"
DEFAULT_ULIMITS: dict[str, int] = {"memlock": -1, "stack": 64 * 1024 * 1024}
EXTRA_KEYS = frozenset({"ulimits", "mem_limit"})
LIVE_STATES = ("running", "paused", "restarting")
STATE_POLL_S = 0.05  # container state and removal polls
READY_FIRST_S = 0.05  # readiness polls: 50 ms, then x1.5 up to 2 s
READY_BACKOFF = 1.5
READY_MAX_S = 2.0


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


# --------------------------------------------------------------------------- spec -> container config


def gpu_config(gpus: list[str] | str | None) -> tuple[list[DeviceRequest], str]:
    """Device requests and the matching NVIDIA_VISIBLE_DEVICES for ``spec.gpus``.

    A list names GPUs (UUIDs or indices); "all" is ``--gpus all``; None asks for no GPU and sets
    ``void``, so that an image's own NVIDIA_VISIBLE_DEVICES=all cannot expose GPUs anyway.
    """
    if gpus is None:
        return [], "void"
    if gpus == "all":
        return [DeviceRequest(count=-1, capabilities=[["gpu"]])], "all"
    ids = [str(g) for g in gpus]
    if not ids or any(not g or "," in g for g in ids):
        raise ServerError(f"invalid GPU list {gpus!r}: give GPU UUIDs or indices, 'all', or none")
    return [DeviceRequest(device_ids=ids, capabilities=[["gpu"]])], ",".join(ids)


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
    ulimits: list[Ulimit]
    ipc_mode: str
    shm_size: str
    mounts: list[Mount]
    mem_limit: object


def container_config(spec: ServerSpec) -> ContainerConfig:
    """Keyword arguments for ``client.containers.create`` (pure: no engine needed)."""
    if not spec.image:
        raise ServerError(f"{spec.name}: the docker runtime needs an image for arm {spec.arm!r}")
    unknown = set(spec.extra) - EXTRA_KEYS
    if unknown:
        raise ServerError(f"{spec.name}: unknown docker options {sorted(unknown)} (known: {sorted(EXTRA_KEYS)})")
    device_requests, visible = gpu_config(spec.gpus)
    given = {**spec.env, **spec.secret_env}.get("NVIDIA_VISIBLE_DEVICES")
    if given is not None and given != visible:
        shown = "***" if "NVIDIA_VISIBLE_DEVICES" in spec.secret_env else given
        raise ServerError(
            f"{spec.name}: NVIDIA_VISIBLE_DEVICES={shown!r} in the environment contradicts the GPUs requested "
            f"({spec.gpus!r} -> {visible!r})",
            hint="leave NVIDIA_VISIBLE_DEVICES out of the manifest's env: kit sets it from the GPUs it assigns",
        )
    cport = spec.container_port or spec.port
    kwargs = ContainerConfig(
        image=spec.image,
        command=list(spec.command),
        name=spec.name,
        detach=True,
        labels={**spec.labels, MANAGED_LABEL: "1"},
        environment={**spec.env, "NVIDIA_VISIBLE_DEVICES": visible, **spec.secret_env},
        ports={f"{cport}/tcp": (spec.host, spec.port)},
        init=True,
        auto_remove=False,
        device_requests=device_requests,
        ulimits=ulimit_config(spec.extra, spec.gpus),
    )
    if spec.ipc_host:
        kwargs["ipc_mode"] = "host"  # the host's /dev/shm; shm_size would be ignored
    elif spec.shm_size:
        kwargs["shm_size"] = spec.shm_size
    if spec.model_mount is not None:
        src, dst = spec.model_mount
        kwargs["mounts"] = [Mount(target=dst, source=src, type="bind", read_only=True)]
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


# --------------------------------------------------------------------------- helpers


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


class _ContainerLogs:
    """The container's output as a byte stream (for ``LogPump``), which ``close`` can cut."""

    def __init__(self, container: Any) -> None:
        self.container = container
        self.stream: Any = None

    def __call__(self) -> Iterable[bytes]:
        self.stream = self.container.logs(stream=True, follow=True, stdout=True, stderr=True)
        stream: Iterable[bytes] = self.stream
        return stream

    def close(self) -> None:
        if self.stream is not None:
            with contextlib.suppress(Exception):
                self.stream.close()


def _finish(pump: LogPump, logs: _ContainerLogs, timeout: float = 5.0) -> None:
    """Wait for the log stream to end (it does when the container stops); cut it if it does not."""
    pump.join(timeout)
    if pump.is_alive():
        logs.close()
        pump.join(2.0)


class ContainerExited(ServerError):
    """The container ended when it should have been serving: carries its final state."""

    def __init__(self, message: str, *, hint: str | None, status: int | None, oom_killed: bool,
                 tail: list[str]) -> None:
        super().__init__(message, hint=hint)
        self.status = status
        self.oom_killed = oom_killed
        self.tail = tail


# --------------------------------------------------------------------------- the server


class DockerServer:
    """One started container. ``stop`` is idempotent and confirms the container is gone.

    When ``wait_ready`` or ``check_alive`` finds the container dead (or the deadline passed), it stops
    and removes it before raising, so the error carries the final state and nothing is left; a later
    ``stop`` returns the same StopInfo.
    """

    def __init__(self, spec: ServerSpec, container: Any, client: Any) -> None:
        self.spec = spec
        self.container = container
        self.client = client
        self.id: str = container.id
        self.started = time.monotonic()
        self._stopped: StopInfo | None = None
        self._inspect: JsonObject = dict(container.attrs)
        self._logs = _ContainerLogs(container)
        self._pump = LogPump(self._logs, spec.log_path, spec.redact, name=f"docker-log-{spec.name}",
                             errors=(DockerException, requests.RequestException, OSError))
        self._pump.start()

    # ---- state

    def _state(self) -> dict[str, Any] | None:
        """The container's State from a fresh inspect, or None when it no longer exists."""
        try:
            self.container.reload()
        except NotFound:
            return None
        except (DockerException, requests.RequestException) as e:
            raise ServerError(f"lost the Docker engine while watching {self.spec.name}: {explanation(e)}",
                              hint=f"`docker info`; then `kit clean` removes {self.spec.name} if it is left") from None
        self._inspect = dict(self.container.attrs)
        state = self._inspect.get("State")
        return dict(state) if isinstance(state, dict) else {}

    def _not_running(self) -> bool:
        st = self._state()
        return st is None or st.get("Status") not in LIVE_STATES

    def _wait_not_running(self, timeout: float) -> bool:
        return poll_until(self._not_running, timeout, interval=STATE_POLL_S)

    def _kill(self, signal: str) -> None:
        try:
            self.container.kill(signal=signal)
        except NotFound:
            pass
        except APIError as e:
            if "is not running" not in explanation(e):
                raise ServerError(f"cannot send {signal} to {self.spec.name}: {explanation(e)}") from None

    # ---- protocol

    def wait_ready(self) -> float:
        url = self.spec.base_url + self.spec.readiness_path

        def ready() -> bool:
            if self._not_running():
                raise self._died("exited during start-up")
            return http_ok(url)

        if poll_until(ready, Deadline(self.started + self.spec.ready_timeout_s), interval=READY_FIRST_S,
                      backoff=READY_BACKOFF, max_interval=READY_MAX_S):
            return time.monotonic() - self.started
        self.stop()
        tail = _indent(tail_lines(self.spec.log_path, 30))
        raise ServerError(
            f"container {self.spec.name} for {self.spec.arm} not ready at {url} after "
            f"{self.spec.ready_timeout_s:g} s (stopped and removed); last log lines:\n{tail}",
            hint=f"raise server.ready_timeout_s if it is just slow, or read {self.spec.log_path}",
        )

    def check_alive(self) -> None:
        if self._not_running():
            raise self._died("died")

    def _died(self, what: str) -> ContainerExited:
        """Stop (collect the final state and logs, remove) and build the error to raise."""
        info = self.stop()
        tail = tail_lines(self.spec.log_path, 30)
        oom = bool(info.details.get("oom_killed"))
        err = info.details.get("error") or ""
        hint = f"full log: {self.spec.log_path}"
        if oom:
            hint = "the container ran out of host memory (cgroup OOM kill); " + hint
        elif info.exit_code == 137:
            hint = "exit code 137 without OOMKilled: killed by SIGKILL from outside (e.g. `docker kill`); " + hint
        return ContainerExited(
            f"container {self.spec.name} for {self.spec.arm} {what}: exit code {info.exit_code}, "
            f"OOMKilled {oom}{f', engine error: {err}' if err else ''}; last log lines:\n{_indent(tail)}",
            hint=hint,
            status=info.exit_code,
            oom_killed=oom,
            tail=tail,
        )

    def stop(self) -> StopInfo:
        if self._stopped is not None:
            return self._stopped
        t0 = time.monotonic()
        st = self._state()
        if st is None:
            _finish(self._pump, self._logs, 2.0)
            self._stopped = StopInfo(None, None, round(time.monotonic() - t0, 4),
                                     ContainerStopDetails(container_id=self.id, removed_before_stop=True))
            return self._stopped
        sent: str | None = None
        if st.get("Status") in LIVE_STATES:
            sent = "SIGTERM"
            self._kill("SIGTERM")
            if not self._wait_not_running(self.spec.stop_grace_s):
                sent = "SIGKILL"
                self._kill("SIGKILL")
                if not self._wait_not_running(30.0):
                    raise ServerError(f"container {self.spec.name} still runs 30 s after SIGKILL",
                                      hint=f"docker rm -f {self.id[:12]}")
        final = self._state() or st
        _finish(self._pump, self._logs, 5.0)
        self._remove()
        self._stopped = StopInfo(
            exit_code=final.get("ExitCode"),
            signal=sent,
            stop_s=round(time.monotonic() - t0, 4),
            details=ContainerStopDetails(
                container_id=self.id,
                status=final.get("Status"),
                oom_killed=bool(final.get("OOMKilled")),
                error=final.get("Error") or None,
                started_at=final.get("StartedAt"),
                finished_at=final.get("FinishedAt"),
                log_bytes=self._pump.bytes_written,
                log_error=self._pump.error,
                removed=True,
            ),
        )
        return self._stopped

    def _remove(self) -> None:
        with contextlib.suppress(NotFound):
            self.container.remove(force=True, v=True)
        if not wait_gone(self.client, self.id, 10.0):
            raise ServerError(f"container {self.spec.name} ({self.id[:12]}) still exists after removal",
                              hint=f"docker rm -f {self.id[:12]}")

    def describe(self) -> ContainerDescription:
        if self._stopped is None:
            self._state()
        inspect = redact_inspect(self._inspect, self.spec)
        assert isinstance(inspect, dict)
        return ContainerDescription(
            runtime="docker",
            container_id=self.id,
            name=self.spec.name,
            image=self.spec.image,
            secret_env_names=sorted(self.spec.secret_env),
            inspect=inspect,
        )


def _indent(lines: list[str]) -> str:
    return "\n".join(f"    {line}" for line in lines) or "    (no output)"


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


# --------------------------------------------------------------------------- the runtime


class DockerRuntime:
    """``Runtime`` over the Docker SDK. The client is made on first use unless one is given."""

    name = "docker"

    def __init__(self, client: Any | None = None) -> None:
        self._client = client

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = connect()
        return self._client

    def create_only(self, spec: ServerSpec) -> Any:
        """Create the container without starting it (the caller removes it). Raises ServerError."""
        kwargs = container_config(spec)
        try:
            return self.client.containers.create(**kwargs)
        except ImageNotFound as e:
            raise ServerError(
                f"cannot create {spec.name} for {spec.arm}: image {spec.image} not found: {explanation(e)}",
                hint="kit builds each arm's image before the cells run; or `docker load` it",
            ) from None
        except APIError as e:
            msg = explanation(e)
            raise ServerError(f"cannot create {spec.name} for {spec.arm}: {msg}",
                              hint=failure_hint(msg, spec)) from None

    def start(self, spec: ServerSpec) -> DockerServer:
        container = self.create_only(spec)
        try:
            container.start()
        except APIError as e:
            msg = explanation(e)
            gone = remove_container(self.client, container)
            cport = spec.container_port or spec.port
            raise ServerError(
                f"cannot start {spec.name} for {spec.arm} (publishing {spec.host}:{spec.port} -> {cport}/tcp): "
                f"{msg}" + ("" if gone else f"; the created container {container.id[:12]} could not be removed"),
                hint=failure_hint(msg, spec),
            ) from None
        except BaseException:
            remove_container(self.client, container)
            raise
        try:
            container.reload()
            return DockerServer(spec, container, self.client)
        except BaseException:
            remove_container(self.client, container)
            raise

    def describe(self) -> EngineFacts:
        return engine_facts(self.client)

