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
"""


from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable
from typing import Any, cast

import requests
from docker.errors import APIError, DockerException, ImageNotFound, NotFound

from kit.errors import ServerError
from kit.plumbing.jsontypes import JsonObject
from kit.plumbing.logpump import LogPump
from kit.plumbing.net import http_ok
from kit.plumbing.poll import Deadline, poll_until
from kit.runtime import (
    ContainerDescription,
    ContainerStopDetails,
    ServerSpec,
    StopInfo,
    log_note,
    tail_lines,
)
from kit.runtime.docker.config import container_config, failure_hint, redact_inspect
from kit.runtime.docker.engine import (
    LIVE_STATES,
    STATE_POLL_S,
    EngineFacts,
    connect,
    engine_facts,
    explanation,
    remove_container,
    wait_gone,
)
from kit.runtime.docker.gpus import GpusSeen, gpus_seen

READY_FIRST_S = 0.05  # readiness polls: 50 ms, then x1.5 up to 2 s
READY_BACKOFF = 1.5
READY_MAX_S = 2.0


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
        self._gpus_seen: GpusSeen | None = None
        self._inspect: JsonObject = dict(container.attrs)
        self._logs = _ContainerLogs(container)
        self._pump = LogPump(self._logs, spec.log_path, name=f"docker-log-{spec.name}",
                             errors=(DockerException, requests.RequestException, OSError), limit=spec.log_limit_bytes)
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
            return http_ok(url, context=self.spec.ssl_context)

        if poll_until(ready, Deadline(self.started + self.spec.ready_timeout_s), interval=READY_FIRST_S,
                      backoff=READY_BACKOFF, max_interval=READY_MAX_S):
            took = time.monotonic() - self.started
            self._check_gpus()
            return took
        self.stop()
        lines = tail_lines(self.spec.log_path, 30)
        tail = _indent(lines)
        raise ServerError(
            f"container {self.spec.name} for {self.spec.arm} not ready at {url} after "
            f"{self.spec.ready_timeout_s:g} s (stopped and removed){log_note(lines)}\nlast log lines:\n{tail}",
            hint=f"raise server.ready_timeout_s if it is just slow, or read {self.spec.log_path}",
        )

    def _check_gpus(self) -> None:
        """The container sees exactly the GPUs asked for (nvidia-smi inside it), or the cell fails."""
        if self.spec.gpus is None:
            return
        self._gpus_seen = gpus_seen(self.container, self.spec.gpus, self.spec.driver_dir)
        if self._gpus_seen["ok"] is False:
            self.stop()
            raise ServerError(
                f"container {self.spec.name} sees GPUs {self._gpus_seen['seen']} but was given {self.spec.gpus} "
                f"(mode {self.spec.gpu_mode}; stopped and removed)",
                hint="the engine passed other GPUs than kit asked for: check server.docker_gpus.mode, the engine's "
                     "NVIDIA runtime configuration and NVIDIA_VISIBLE_DEVICES in the image",
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
            f"OOMKilled {oom}{f', engine error: {err}' if err else ''}{log_note(tail)}\n"
            f"last log lines:\n{_indent(tail)}",
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
            self._pump.finish(2.0, self._logs.close)  # the log is final from here (LogPump.finish)
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
        # The stream ends once the container stopped and Docker delivered the rest; cut at 5 s if it does not.
        self._pump.finish(5.0, self._logs.close)
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
                log_dropped_bytes=self._pump.dropped_bytes,
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
            gpu_mode=self.spec.gpu_mode,
            gpus_seen=cast(JsonObject, self._gpus_seen),
            inspect=inspect,
        )


def _indent(lines: list[str]) -> str:
    return "\n".join(f"    {line}" for line in lines) or "    (no output)"



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

