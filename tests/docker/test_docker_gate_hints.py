"""What the GPU and port gates tell a user to run when a container holds what a cell needs (a real engine).

A port a container publishes is held on the host by ``docker-proxy``, a child of dockerd in dockerd's own process
group: the port gate's fix was ``kill -TERM -- -<that group>``, which stops Docker itself (found 2026-12-07). And a
container of a live run in another lock directory was a leftover to both gates: ``docker rm -f`` of a server
mid-cell. The gates now ask Docker which container stands behind the process, and read its labels.
"""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
from docker_helpers import SESSION_RUN
from gates.fake_nvml import FakeProbe
from gates.gate_helpers import make_manifest
from support.kits import labels_of
from support.ports import free_port

from kit.gates.gpu import check_gpus
from kit.gates.ports import check_ports
from kit.nvml import GpuProcess
from kit.plumbing.procs import start_ticks

pytestmark = pytest.mark.docker


def _run(client: Any, image: str, name: str, port: int, labels: dict[str, str]) -> Any:
    return client.containers.run(image, ["sleep", "600"], detach=True, labels=labels, name=f"kit-test-{name}",
                                 ports={"8000/tcp": ("127.0.0.1", port)})


def _proxied(check: Any) -> bool:
    procs = [p for ls in check.evidence.get("owners", {}).values() for s in ls for p in s.get("processes", [])]
    return any(p["name"] == "docker-proxy" for p in procs)


def test_a_published_port_names_its_container_never_dockerds_process_group(client: Any, engine_image: Any) -> None:
    port = free_port()
    stray = _run(client, engine_image.image_id, f"{SESSION_RUN}-stray", port, {"kit.test": SESSION_RUN})
    try:
        check = check_ports(make_manifest(port=port, port_deadline_s=0.05), ports=[port])
        if check.ok or not _proxied(check):
            pytest.skip("this engine publishes ports without docker-proxy (userland-proxy off): nothing holds them")
        assert "kill" not in (check.hint or "") and "kill" not in check.message, check.hint
        assert check.hint == f"docker rm -f {stray.short_id}; or choose other ports in the manifest"
        assert f"publishing a port of docker container {stray.short_id} kit-test-{SESSION_RUN}-stray" in check.message
    finally:
        stray.remove(force=True)


def test_a_live_runs_container_in_another_lock_directory_is_theirs_to_both_gates(
        client: Any, engine_image: Any, other_kit: subprocess.Popen[bytes]) -> None:
    assert start_ticks(other_kit.pid) is not None
    run = f"{SESSION_RUN}-hints"
    labels = labels_of(other_kit, **{"kit.run": run, "kit.cell": "a-r1"})
    port = free_port()
    live = _run(client, engine_image.image_id, run, port, labels)
    try:
        live.reload()
        server_pid = int(live.attrs["State"]["Pid"])  # its process as the host's NVML would list it
        probe = FakeProbe.idle(1)
        probe.gpus[0].used_mib = 4700
        probe.gpus[0].processes = [GpuProcess(pid=server_pid, used_bytes=4700 << 20)]
        gpu, _ = check_gpus(make_manifest(gpus=1, gpu_deadline_s=0.05), probe)
        assert not gpu.ok and gpu.evidence["of_live_runs"][str(server_pid)]["pid"] == other_kit.pid
        assert "docker rm" not in (gpu.hint or "") and "docker rm" not in gpu.message, gpu.hint
        assert gpu.hint is not None and gpu.hint.startswith("wait for that run to finish")
        assert f"docker container {live.short_id} kit-test-{run}" in gpu.message

        check = check_ports(make_manifest(port=port, port_deadline_s=0.05), ports=[port])
        if _proxied(check):  # published through docker-proxy: its owner is the live run
            assert "docker rm" not in (check.hint or "") and "kill" not in (check.hint or ""), check.hint
            assert check.hint is not None and check.hint.startswith("wait for that run to finish")
            assert "still running" in check.message

        other_kit.kill()
        other_kit.wait()  # its kit is gone: now the container is a leftover, and named so
        gpu, _ = check_gpus(make_manifest(gpus=1, gpu_deadline_s=0.05), probe)
        assert gpu.hint == f"kit clean, or docker rm -f {live.short_id}"
    finally:
        live.remove(force=True)
