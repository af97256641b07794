"""DockerRuntime against a real engine: the embedded engine served from its image, failures, secrets, GPUs."""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from docker_helpers import make_spec, names_left

from kit.errors import ExitCode, ServerError
from kit.runtime.docker import ContainerExited, DockerRuntime, container_config

pytestmark = pytest.mark.docker

GPU_UUIDS = ["GPU-0a1b2c3d-0000-1111-2222-333344445555", "GPU-9f8e7d6c-6666-7777-8888-999900001111"]
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def chat_stream(base_url: str) -> list[dict[str, Any]]:
    body = {"model": "kit-moe", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": True}
    req = urllib.request.Request(base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    events = []
    with _OPENER.open(req, timeout=30) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        for raw in r:
            line = raw.decode().strip()
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line[6:]))
    return events


def test_engine_image_serves_a_streaming_chat(client: Any, engine_image: Any, tmp_path: Path) -> None:
    rt = DockerRuntime(client)
    spec = make_spec(tmp_path, engine_image.image_id, "engine")
    server = rt.start(spec)
    try:
        ready_s = server.wait_ready()
        assert ready_s < 30
        events = chat_stream(spec.base_url)
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e.get("choices"))
        assert len(events) >= 8 and text.strip()
        server.check_alive()
        desc = server.describe()
        attrs = desc["inspect"]
        assert attrs["Config"]["Labels"]["kit.managed"] == "1"
        assert attrs["Config"]["Labels"]["kit.cell"] == "baseline-r1"
        assert attrs["HostConfig"]["Init"] is True
        assert attrs["HostConfig"]["AutoRemove"] is False
        assert attrs["HostConfig"]["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(spec.port)}]}
        assert "NVIDIA_VISIBLE_DEVICES=void" in attrs["Config"]["Env"]
        assert not attrs["HostConfig"]["DeviceRequests"]
        assert not attrs["HostConfig"]["Ulimits"]  # no GPUs: no memlock/stack ulimits by default
    finally:
        info = server.stop()
    assert info.signal == "SIGTERM" and info.exit_code == 0, info
    assert info.details["removed"] and not info.details["oom_killed"]
    assert server.stop() is info  # idempotent
    assert names_left(client, spec) == []
    log = spec.log_path.read_text()
    assert "ready" in log and "stopping" in log
    facts = rt.describe()
    assert facts["engine_version"] and facts["api_version"] and facts["storage_driver"]
    assert "runc" in facts["runtimes"] and facts["base_url"]


def test_exit_during_startup_fails_fast_with_code_and_log(client: Any, engine_image: Any, tmp_path: Path) -> None:
    cmd = ["sh", "-c", "echo loading weights; echo 'RuntimeError: no model here' >&2; exit 3"]
    spec = make_spec(tmp_path, engine_image.image_id, "early-exit", command=cmd)
    server = DockerRuntime(client).start(spec)
    t0 = time.monotonic()
    with pytest.raises(ContainerExited) as err:
        server.wait_ready()
    assert time.monotonic() - t0 < 10
    e = err.value
    assert e.exit_code == ExitCode.SERVER_FAILED and e.status == 3 and not e.oom_killed
    assert "exit code 3" in e.message and "RuntimeError: no model here" in e.message
    assert any("loading weights" in line for line in e.tail)
    assert names_left(client, spec) == []
    assert server.stop().exit_code == 3


def test_killed_container_is_detected_by_check_alive(client: Any, engine_image: Any, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, engine_image.image_id, "killed")
    server = DockerRuntime(client).start(spec)
    try:
        server.wait_ready()
        server.check_alive()
        client.containers.get(spec.name).kill()  # docker kill: SIGKILL from outside
        deadline = time.monotonic() + 10
        with pytest.raises(ContainerExited) as err:
            while time.monotonic() < deadline:
                server.check_alive()
                time.sleep(0.05)
        assert err.value.status == 137 and not err.value.oom_killed
        assert "exit code 137" in err.value.message and "ready" in err.value.message
        assert "docker kill" in str(err.value.hint)
    finally:
        server.stop()
    assert names_left(client, spec) == []


def test_oom_kill_is_reported(client: Any, engine_image: Any, tmp_path: Path) -> None:
    cmd = ["python3", "-c", "print('allocating', flush=True); x = bytearray(512 << 20)"]
    spec = make_spec(tmp_path, engine_image.image_id, "oom", command=cmd,
                     extra={"mem_limit": "48m"})
    server = DockerRuntime(client).start(spec)
    with pytest.raises(ContainerExited) as err:
        server.wait_ready()
    assert err.value.oom_killed and err.value.status == 137
    assert "OOMKilled True" in err.value.message and "out of host memory" in str(err.value.hint)
    assert names_left(client, spec) == []


def test_ready_deadline_stops_and_removes(client: Any, engine_image: Any, tmp_path: Path) -> None:
    cmd = ["python3", "-c", "import time; print('never ready', flush=True); time.sleep(600)"]
    spec = make_spec(tmp_path, engine_image.image_id, "slow", command=cmd, ready_timeout_s=1.5, stop_grace_s=1.0)
    server = DockerRuntime(client).start(spec)
    with pytest.raises(ServerError, match=r"not ready at .* after 1.5 s") as err:
        server.wait_ready()
    assert "never ready" in err.value.message
    info = server.stop()
    assert info.signal in ("SIGTERM", "SIGKILL") and names_left(client, spec) == []


def test_gpu_request_without_nvidia_runtime_fails_clearly(client: Any, engine_image: Any, tmp_path: Path) -> None:
    if "nvidia" in client.info().get("Runtimes", {}):
        pytest.skip("this engine has the NVIDIA runtime")
    spec = make_spec(tmp_path, engine_image.image_id, "gpus", gpus=list(GPU_UUIDS))
    with pytest.raises(ServerError) as err:
        DockerRuntime(client).start(spec)
    assert 'could not select device driver "" with capabilities: [[gpu]]' in err.value.message
    assert "NVIDIA Container Toolkit" in str(err.value.hint)
    assert err.value.exit_code == ExitCode.SERVER_FAILED
    assert names_left(client, spec) == []  # the "created" container was removed


@pytest.mark.parametrize(("gpus", "ids", "count", "visible"), [
    (GPU_UUIDS, GPU_UUIDS, 0, ",".join(GPU_UUIDS)),
    ("all", [], -1, "all"),
])
def test_created_container_names_the_requested_gpus(client: Any, engine_image: Any, tmp_path: Path, gpus: Any,
                                                    ids: Any, count: int, visible: str) -> None:
    spec = make_spec(tmp_path, engine_image.image_id, f"create-{count}", gpus=gpus)
    container = DockerRuntime(client).create_only(spec)
    try:
        container.reload()
        assert container.status == "created"
        (req,) = container.attrs["HostConfig"]["DeviceRequests"]
        assert (req["DeviceIDs"] or []) == ids and req["Count"] == count and req["Capabilities"] == [["gpu"]]
        assert f"NVIDIA_VISIBLE_DEVICES={visible}" in container.attrs["Config"]["Env"]
        limits = {u["Name"]: (u["Soft"], u["Hard"]) for u in container.attrs["HostConfig"]["Ulimits"]}
        assert limits == {"memlock": (-1, -1), "stack": (67108864, 67108864)}  # with GPUs: on by default
    finally:
        container.remove(force=True)


def test_conflicting_nvidia_visible_devices_is_refused(tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "img", "conflict", port=1, gpus=["0"], env={"NVIDIA_VISIBLE_DEVICES": "all"})
    with pytest.raises(ServerError, match="contradicts the GPUs requested"):
        container_config(spec)


def test_busy_host_port_fails_naming_the_port(client: Any, engine_image: Any, tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        spec = make_spec(tmp_path, engine_image.image_id, "busy-port", port=port)
        with pytest.raises(ServerError) as err:
            DockerRuntime(client).start(spec)
    assert f"127.0.0.1:{port}" in err.value.message and "address already in use" in err.value.message
    assert f"host port 127.0.0.1:{port} is taken" in str(err.value.hint)
    assert names_left(client, spec) == []


def test_default_ulimits_applied_or_failure_surfaced(client: Any, engine_image: Any, tmp_path: Path) -> None:
    cmd = ["sh", "-c", "ulimit -l; ulimit -s; sleep 600"]
    spec = make_spec(tmp_path, engine_image.image_id, "ulimits", command=cmd, extra={"ulimits": True},
                     stop_grace_s=1.0)
    try:
        server = DockerRuntime(client).start(spec)
    except ServerError as e:  # e.g. this sandbox: dockerd's own memlock hard limit is 8 MiB
        assert "rlimit" in e.message and "LimitMEMLOCK" in str(e.hint)
        assert "ulimits']=False" in str(e.hint)
    else:
        try:
            limits = {u["Name"]: u["Hard"] for u in server.describe()["inspect"]["HostConfig"]["Ulimits"]}
            assert limits == {"memlock": -1, "stack": 67108864}
        finally:
            server.stop()
    assert names_left(client, spec) == []


def test_secrets_never_reach_log_or_describe(client: Any, engine_image: Any, tmp_path: Path) -> None:
    secret = "hf_s3cr3t-token-value-XYZ"
    cmd = ["sh", "-c", 'echo "token is $HF_TOKEN"; echo "again: $HF_TOKEN" >&2; sleep 600']
    spec = make_spec(tmp_path, engine_image.image_id, "secrets", command=cmd, secret_env={"HF_TOKEN": secret},
                     env={"API_KEY_HINT": "not-secret-but-looks-secret"}, stop_grace_s=1.0)
    server = DockerRuntime(client).start(spec)
    try:
        deadline = time.monotonic() + 10
        while "again" not in (spec.log_path.read_text() if spec.log_path.exists() else ""):
            assert time.monotonic() < deadline, "no output from the container"
            time.sleep(0.05)
        described = json.dumps(server.describe())
    finally:
        info = server.stop()
    log = spec.log_path.read_text()
    assert "token is ***" in log and "again: ***" in log
    assert secret not in log and secret not in described
    assert "HF_TOKEN=***" in described and "API_KEY_HINT=***" in described
    assert secret not in json.dumps(server.describe()) and secret not in repr(info)
    assert names_left(client, spec) == []


def test_missing_image_is_a_server_error(client: Any, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, "kit-test/does-not-exist:1", "no-image")
    with pytest.raises(ServerError, match="not found"):
        DockerRuntime(client).start(spec)
    assert names_left(client, spec) == []


def test_server_cpus_become_the_containers_cpuset(client: Any, engine_image: Any, tmp_path: Path) -> None:
    import os
    from dataclasses import replace

    last = str(max(os.sched_getaffinity(0)))
    spec = replace(make_spec(tmp_path, engine_image.image_id, "engine"), cpus=last)
    server = DockerRuntime(client).start(spec)
    try:
        server.wait_ready()
        assert server.describe()["inspect"]["HostConfig"]["CpusetCpus"] == last
        # the kernel's view inside the container: the engine (and init) may run on that CPU only
        out = client.containers.get(server.describe()["container_id"]).exec_run(
            ["sh", "-c", "grep Cpus_allowed_list /proc/1/status /proc/self/status"]).output.decode()
        assert [line.split(":")[-1].strip() for line in out.splitlines()] == [last, last], out
    finally:
        server.stop()
    assert names_left(client, spec) == []
