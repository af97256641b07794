"""The docker runtime's GPU modes as the container-create arguments they produce (no engine needed): nvidia
(DeviceRequest), cdi (the engine's "cdi" driver, nvidia.com/gpu names), devices (device nodes from the driver's
/proc table, the driver folder read-only, the environment); the manifest's server.docker_gpus; the gate per mode.
The devices mode against a real engine is in tests/docker/test_docker_gpu_modes.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from support.manifests import manifest_data, manifest_yaml

from kit.errors import ManifestError, ServerError
from kit.gates.container_gpu import check_container_gpus
from kit.manifest import load_manifest
from kit.plan import Cell
from kit.runtime.docker import container_config, gpus
from kit.runtime.docker.config import ulimit_config
from kit.runtime.docker.gpus import cdi_args, devices_args, driver_gpus, find_driver, gpus_seen, nvidia_args
from kit.server_spec import server_spec

UUIDS = ["GPU-aaaaaaaa-0000-1111-2222-333344445555", "GPU-bbbbbbbb-6666-7777-8888-999900001111"]


def fake_driver(root: Path, minors: dict[str, int], *, nodes: bool = True) -> tuple[Path, Path, Path]:
    """A driver's /proc table (the real file's layout), device nodes (links to /dev/null: real character
    devices, no root needed) and a driver folder with lib64/libcuda.so.1 and bin/nvidia-smi."""
    proc, dev, drv = root / "proc", root / "dev", root / "nvidia"
    for i, (uuid, minor) in enumerate(minors.items()):
        d = proc / f"0000:{0x18 + i * 0x20:02x}:00.0"
        d.mkdir(parents=True)
        (d / "information").write_text(
            f"Model: \t\t NVIDIA H200\nIRQ:   \t\t 123\nGPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.99.00.01\n"
            f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDevice Minor: \t {minor}\nBus Location: \t {d.name}\n")
    dev.mkdir()
    if nodes:
        for name in [*(f"nvidia{m}" for m in minors.values()), "nvidiactl", "nvidia-uvm"]:
            (dev / name).symlink_to("/dev/null")
    (drv / "lib64").mkdir(parents=True)
    (drv / "bin").mkdir()
    (drv / "lib64" / "libcuda.so.1").write_bytes(b"")
    (drv / "bin" / "nvidia-smi").write_bytes(b"")
    return proc, dev, drv


def test_nvidia_mode_is_a_gpu_device_request() -> None:
    a = nvidia_args(UUIDS)
    (req,) = a.device_requests
    assert req["Driver"] == "" and req["DeviceIDs"] == UUIDS and req["Capabilities"] == [["gpu"]]
    assert a.environment == {"NVIDIA_VISIBLE_DEVICES": ",".join(UUIDS)} and not a.devices and not a.mounts
    (req,) = nvidia_args("all").device_requests
    assert req["Count"] == -1


def test_cdi_mode_names_cdi_devices_for_the_cdi_driver() -> None:
    a = cdi_args(UUIDS)
    (req,) = a.device_requests
    assert req["Driver"] == "cdi" and req["DeviceIDs"] == [f"nvidia.com/gpu={u}" for u in UUIDS]
    assert a.environment == {"NVIDIA_VISIBLE_DEVICES": "void"}  # the spec decides, not a hook
    assert cdi_args("all").device_requests[0]["DeviceIDs"] == ["nvidia.com/gpu=all"]
    with pytest.raises(ServerError, match="invalid GPU list"):
        cdi_args(["0=1"])


def test_devices_mode_maps_uuids_to_their_minors(tmp_path: Path) -> None:
    proc, dev, drv = fake_driver(tmp_path, {UUIDS[0]: 4, UUIDS[1]: 1})
    (dev / "nvidia-uvm-tools").symlink_to("/dev/null")
    a = devices_args([UUIDS[1]], str(drv), proc=proc, dev=dev)
    assert a.devices == [f"{dev}/nvidia1:/dev/nvidia1:rwm", f"{dev}/nvidiactl:/dev/nvidiactl:rwm",
                         f"{dev}/nvidia-uvm:/dev/nvidia-uvm:rwm", f"{dev}/nvidia-uvm-tools:/dev/nvidia-uvm-tools:rwm"]
    assert [(m["Source"], m["Target"], m["ReadOnly"]) for m in a.mounts] == [(str(drv), str(drv), True)]
    assert a.environment == {"NVIDIA_VISIBLE_DEVICES": "void", "CUDA_VISIBLE_DEVICES": UUIDS[1],
                             "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "LD_LIBRARY_PATH": f"{drv}/lib64"}
    assert not a.device_requests
    # an index counts in PCI bus order, as NVML does; "all" is every GPU the driver lists
    assert devices_args(["0"], str(drv), proc=proc, dev=dev).devices[0].startswith(f"{dev}/nvidia4:")
    assert [d.split(":")[1] for d in devices_args("all", str(drv), proc=proc, dev=dev).devices[:2]] == [
        "/dev/nvidia4", "/dev/nvidia1"]


def test_devices_mode_refuses_what_it_cannot_pass(tmp_path: Path) -> None:
    proc, dev, drv = fake_driver(tmp_path, {UUIDS[0]: 0}, nodes=False)
    with pytest.raises(ServerError, match="not one the NVIDIA driver lists") as e:
        devices_args([UUIDS[1]], str(drv), proc=proc, dev=dev)
    assert UUIDS[0] in e.value.message
    with pytest.raises(ServerError, match=r"nvidia0, .*nvidiactl, .*nvidia-uvm missing") as e:
        devices_args([UUIDS[0]], str(drv), proc=proc, dev=dev)
    assert "nvidia-modprobe" in str(e.value.hint)
    with pytest.raises(ServerError, match="no NVIDIA driver table"):
        driver_gpus(tmp_path / "none")
    with pytest.raises(ServerError, match=r"holds no libcuda\.so\.1"):
        find_driver(str(tmp_path))


def test_driver_among_system_libraries_is_mounted_file_by_file(tmp_path: Path) -> None:
    libs, bins = tmp_path / "lib", tmp_path / "bin"
    libs.mkdir()
    bins.mkdir()
    for name in ["libcuda.so.1", "libcuda.so.550.54", "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1",
                 "libc.so.6", "libstdc++.so.6"]:
        (libs / name).write_bytes(b"")
    (bins / "nvidia-smi").write_bytes(b"")
    d = find_driver(None, lib_dirs=(libs,), bin_dirs=(bins,), driver_dirs=(tmp_path / "absent",))
    targets = {dst for _, dst in d.mounts}
    assert targets == {f"/usr/local/nvidia/lib64/{n}" for n in ["libcuda.so.1", "libcuda.so.550.54",
                       "libnvidia-ml.so.1", "libnvidia-ptxjitcompiler.so.1"]} | {"/usr/local/nvidia/bin/nvidia-smi"}
    assert d.lib_dirs == ("/usr/local/nvidia/lib64",) and d.bin_dirs == ("/usr/local/nvidia/bin",)
    # a self-contained driver folder (the H200 machine's /usr/local/nvidia) wins, mounted whole
    own = tmp_path / "own"
    (own / "lib64").mkdir(parents=True)
    (own / "lib64" / "libcuda.so.1").write_bytes(b"")
    assert find_driver(None, lib_dirs=(libs,), driver_dirs=(own,)).mounts == ((str(own), str(own)),)


def spec(tmp_path: Path, **kw: Any) -> Any:
    from kit.runtime import ServerSpec

    values: dict[str, Any] = dict(name="kit-t", arm="a", command=["x"], env={}, secret_env={}, host="127.0.0.1",
                                  port=1, readiness_path="/", ready_timeout_s=1, stop_grace_s=1,
                                  log_path=tmp_path / "log", labels={}, image="img", container_port=8000)
    values.update(kw)
    return ServerSpec(**values)


def test_container_config_per_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, dev, drv = fake_driver(tmp_path, {UUIDS[0]: 2})
    monkeypatch.setattr(gpus, "PROC_GPUS", proc)
    monkeypatch.setattr(gpus, "DEV", dev)
    cfg = container_config(spec(tmp_path, gpus=[UUIDS[0]], gpu_mode="devices", driver_dir=str(drv),
                                env={"LD_LIBRARY_PATH": "/opt/lib"}, model_mount=("/m", "/model")))
    assert "device_requests" not in cfg or cfg["device_requests"] == []
    assert cfg["devices"][0] == f"{dev}/nvidia2:/dev/nvidia2:rwm"
    assert [m["Target"] for m in cfg["mounts"]] == [str(drv), "/model"]
    env = cfg["environment"]
    assert env["CUDA_VISIBLE_DEVICES"] == UUIDS[0] and env["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert env["LD_LIBRARY_PATH"] == f"/opt/lib:{drv}/lib64"  # the manifest's first, then the driver
    assert container_config(spec(tmp_path, gpus="all", gpu_mode="cdi"))["device_requests"][0]["Driver"] == "cdi"
    cfg = container_config(spec(tmp_path, gpus=None, gpu_mode="devices"))
    assert "devices" not in cfg and cfg["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"
    with pytest.raises(ServerError, match="unknown GPU mode"):
        container_config(spec(tmp_path, gpus="all", gpu_mode="magic"))


def manifest(tmp_path: Path, runtime: str = "docker", **docker_gpus: Any) -> Path:
    data = manifest_data("gpu-modes", runtime=runtime, port=18999)
    data["hardware"] = {"gpus": 1}
    if runtime == "docker":
        for arm in data["arms"]:
            arm["image"] = {"context": "images/engine", "base": "sha256:" + "a" * 64}
    if docker_gpus:
        data["server"]["docker_gpus"] = docker_gpus
    p = tmp_path / "m.yaml"
    p.write_bytes(manifest_yaml(data))
    return p


def test_manifest_docker_gpus(tmp_path: Path) -> None:
    m = load_manifest(manifest(tmp_path), allow_unpinned=True).manifest
    assert m.server.docker_gpus.mode == "nvidia" and m.server.docker_gpus.driver_dir is None
    m = load_manifest(manifest(tmp_path, mode="devices", driver_dir="/usr/local/nvidia", ulimits=False),
                      allow_unpinned=True).manifest
    assert m.server.docker_gpus.mode == "devices"
    s = server_spec(m, Cell(0, "baseline", 1), "r", tmp_path / "log", gpus=[UUIDS[0]])
    assert (s.gpu_mode, s.driver_dir, s.gpus) == ("devices", "/usr/local/nvidia", [UUIDS[0]])
    assert ulimit_config(s.extra, s.gpus) == []  # ulimits: false, though GPUs are asked for
    for bad, words in [({"mode": "vfio"}, "docker_gpus.mode"),
                       ({"mode": "devices", "driver_dir": "usr/nvidia"}, "driver_dir"),
                       ({"mode": "nvidia", "driver_dir": "/usr/local/nvidia"}, "used by mode devices only")]:
        with pytest.raises(ManifestError, match=words):
            load_manifest(manifest(tmp_path, **bad), allow_unpinned=True)
    with pytest.raises(ManifestError, match="for runtime docker"):
        load_manifest(manifest(tmp_path, "process", mode="cdi"), allow_unpinned=True)


class Engine:
    def __init__(self, info: dict[str, Any]) -> None:
        self._info = info

    def info(self) -> dict[str, Any]:
        return self._info

    def close(self) -> None:
        pass


def test_gate_per_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    monkeypatch.setattr("kit.gates.container_gpu.CDI_DIRS", (cdi_dir,))
    m = load_manifest(manifest(tmp_path, mode="cdi"), allow_unpinned=True).manifest
    old = check_container_gpus(m, Engine({"ServerVersion": "20.10.24", "Runtimes": {"runc": {}}}))
    assert not old.ok and "needs Docker 25+" in old.message and "nvidia-ctk cdi generate" in str(old.hint)
    (cdi_dir / "nvidia.yaml").write_text("cdiVersion: 0.6.0\nkind: nvidia.com/gpu\ndevices: [{name: '0'}]\n")
    assert check_container_gpus(m, Engine({"ServerVersion": "27.3.1", "Runtimes": {"runc": {}}})).ok
    m = load_manifest(manifest(tmp_path, mode="nvidia"), allow_unpinned=True).manifest
    no = check_container_gpus(m, Engine({"ServerVersion": "27.3.1", "Runtimes": {"runc": {}}}))
    assert no.ok  # nvidia mode accepts an engine with a CDI spec for nvidia.com/gpu, as before
    proc, dev, drv = fake_driver(tmp_path / "host", {UUIDS[0]: 0})
    m = load_manifest(manifest(tmp_path, mode="devices", driver_dir=str(drv)), allow_unpinned=True).manifest
    monkeypatch.setattr(gpus, "PROC_GPUS", tmp_path / "no-driver")
    c = check_container_gpus(m)
    assert not c.ok and "no NVIDIA driver table" in c.message and c.evidence["mode"] == "devices"
    monkeypatch.setattr(gpus, "PROC_GPUS", proc)
    monkeypatch.setattr(gpus, "DEV", dev)
    c = check_container_gpus(m)
    assert c.ok and c.evidence["devices"][0] == f"{dev}/nvidia0:/dev/nvidia0:rwm"
    assert c.evidence["mounts"] == [f"{drv} -> {drv}"]


class Container:
    def __init__(self, answers: dict[str, tuple[int, bytes]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def exec_run(self, cmd: list[str], **kw: Any) -> tuple[int, bytes]:
        self.calls.append(cmd)
        return self.answers.get(cmd[0], (126, b"OCI runtime exec failed: executable file not found in $PATH"))


def test_gpus_seen_compares_what_nvidia_smi_lists() -> None:
    lists = (0, f"{UUIDS[0]}\n".encode())
    assert gpus_seen(Container({"nvidia-smi": lists}), [UUIDS[0]], None)["ok"] is True
    assert gpus_seen(Container({"nvidia-smi": lists}), UUIDS, None)["ok"] is False
    assert gpus_seen(Container({"nvidia-smi": lists}), "all", None)["ok"] is True
    c = Container({"/drv/bin/nvidia-smi": lists})
    seen = gpus_seen(c, [UUIDS[0]], "/drv")
    assert seen["ok"] is True and seen["command"][0] == "/drv/bin/nvidia-smi" and len(c.calls) == 3
    none = gpus_seen(Container({}), [UUIDS[0]], None)
    assert none["ok"] is None and none["seen"] is None and "executable file not found" in str(none["error"])
    assert os.path.basename(gpus.NVIDIA_SMI[1]) == "nvidia-smi"
