"""The GPU modes against a real engine, without a GPU: the devices mode's container started by DockerRuntime with
device nodes made by mknod (the NVIDIA major 195, or links to /dev/null when not root), a driver folder and the
driver's /proc table laid out as the real ones are; the engine's own inspect data and what the running container
sees (its /dev, its mounts, its environment, a stand-in nvidia-smi run in it by kit). The cdi mode by the device
request a created (never started) container carries."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from docker_helpers import make_spec, names_left

from kit.errors import ServerError
from kit.runtime.docker import DockerRuntime, gpus

pytestmark = pytest.mark.docker

UUID = "GPU-5e1f2a3b-4c5d-6e7f-8091-a2b3c4d5e6f7"
OTHER = "GPU-00000000-1111-2222-3333-444444444444"
MINOR = 3


def node(path: Path, minor: int) -> None:
    if os.geteuid() == 0:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    else:
        path.symlink_to("/dev/null")


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A host as the devices mode reads it: /proc/driver/nvidia/gpus, /dev/nvidia*, the driver's folder."""
    root = tmp_path / "host"
    info = root / "proc" / "0000:9a:00.0"
    info.mkdir(parents=True)
    (info / "information").write_text(f"Model: \t\t NVIDIA H200\nGPU UUID: \t {UUID}\nDevice Minor: \t {MINOR}\n"
                                      "Bus Location: \t 0000:9a:00.0\n")
    dev = root / "dev"
    dev.mkdir()
    node(dev / f"nvidia{MINOR}", MINOR)
    node(dev / "nvidia4", 4)  # another GPU's node: not passed
    node(dev / "nvidiactl", 255)
    node(dev / "nvidia-uvm", 0)
    drv = root / "nvidia"
    (drv / "lib64").mkdir(parents=True)
    (drv / "bin").mkdir()
    (drv / "lib64" / "libcuda.so.1").write_bytes(b"")
    for d in (root, drv, drv / "lib64", drv / "bin"):
        d.chmod(0o755)
    monkeypatch.setattr(gpus, "PROC_GPUS", root / "proc")
    monkeypatch.setattr(gpus, "DEV", dev)
    return root


def smi(host: Path, uuid: str) -> None:
    """A stand-in nvidia-smi in the driver's bin/: lists one GPU, as `--query-gpu=uuid --format=csv,noheader` does."""
    p = host / "nvidia" / "bin" / "nvidia-smi"
    p.write_text(f"#!/bin/sh\necho {uuid}\n")
    p.chmod(0o755)


def test_devices_mode_container_gets_the_nodes_driver_and_environment(client: Any, engine_image: Any,
                                                                      tmp_path: Path, host: Path) -> None:
    smi(host, UUID)
    drv = str(host / "nvidia")
    spec = make_spec(tmp_path, engine_image.image_id, "gpu-devices", gpus=[UUID], gpu_mode="devices",
                     driver_dir=drv, extra={"ulimits": False})
    server = DockerRuntime(client).start(spec)
    try:
        server.wait_ready()
        attrs = client.api.inspect_container(server.id)
        devices = {d["PathInContainer"]: (d["PathOnHost"], d["CgroupPermissions"])
                   for d in attrs["HostConfig"]["Devices"]}
        dev = host / "dev"
        assert devices == {f"/dev/nvidia{MINOR}": (f"{dev}/nvidia{MINOR}", "rwm"),
                           "/dev/nvidiactl": (f"{dev}/nvidiactl", "rwm"),
                           "/dev/nvidia-uvm": (f"{dev}/nvidia-uvm", "rwm")}
        assert not attrs["HostConfig"]["DeviceRequests"]
        mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in attrs["Mounts"]}
        assert mounts[drv] == (drv, False)
        env = dict(e.split("=", 1) for e in attrs["Config"]["Env"])
        assert env["CUDA_VISIBLE_DEVICES"] == UUID and env["NVIDIA_VISIBLE_DEVICES"] == "void"
        assert env["LD_LIBRARY_PATH"] == f"{drv}/lib64" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        # inside: the node with the numbers mknod gave it (not the other GPU's), the driver read-only
        code, out = server.container.exec_run(["sh", "-c", "ls /dev; stat -L -c '%F %t:%T' /dev/nvidia3; "
                                               f"touch {drv}/x 2>&1; ls {drv}/lib64"])
        text = out.decode()
        assert code == 0, text
        assert "nvidia3" in text.split() and "nvidia4" not in text.split()
        if os.geteuid() == 0:
            assert "character special file c3:3" in text
        assert "Read-only file system" in text and "libcuda.so.1" in text
        seen = server.describe()
        assert seen["gpu_mode"] == "devices"
        assert seen["gpus_seen"] == {"asked": [UUID], "seen": [UUID], "ok": True, "error": None,
                                     "command": [f"{drv}/bin/nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"]}
    finally:
        server.stop()
    assert names_left(client, spec) == []


def test_devices_mode_container_seeing_other_gpus_fails_the_cell(client: Any, engine_image: Any, tmp_path: Path,
                                                                 host: Path) -> None:
    smi(host, OTHER)
    spec = make_spec(tmp_path, engine_image.image_id, "gpu-other", gpus=[UUID], gpu_mode="devices",
                     driver_dir=str(host / "nvidia"), extra={"ulimits": False})
    server = DockerRuntime(client).start(spec)
    with pytest.raises(ServerError, match=rf"sees GPUs \['{OTHER}'\] but was given \['{UUID}'\]"):
        server.wait_ready()
    assert names_left(client, spec) == []  # stopped and removed


def test_devices_mode_without_nvidia_smi_serves_and_says_so(client: Any, engine_image: Any, tmp_path: Path,
                                                            host: Path) -> None:
    spec = make_spec(tmp_path, engine_image.image_id, "gpu-nosmi", gpus=[UUID], gpu_mode="devices",
                     driver_dir=str(host / "nvidia"), extra={"ulimits": False})
    server = DockerRuntime(client).start(spec)
    try:
        server.wait_ready()
        seen = server.describe()["gpus_seen"]
        assert seen is not None and seen["ok"] is None and seen["seen"] is None
        assert "nvidia-smi" in str(seen["error"])
    finally:
        server.stop()


def test_cdi_mode_creates_a_cdi_device_request(client: Any, engine_image: Any, tmp_path: Path) -> None:
    spec = make_spec(tmp_path, engine_image.image_id, "gpu-cdi", gpus=[UUID], gpu_mode="cdi",
                     extra={"ulimits": False})
    container = DockerRuntime(client).create_only(spec)
    try:
        attrs = client.api.inspect_container(container.id)
        (req,) = attrs["HostConfig"]["DeviceRequests"]
        assert req["Driver"] == "cdi" and req["DeviceIDs"] == [f"nvidia.com/gpu={UUID}"]
        assert not attrs["HostConfig"]["Devices"]
        assert "NVIDIA_VISIBLE_DEVICES=void" in attrs["Config"]["Env"]
    finally:
        container.remove(force=True)
