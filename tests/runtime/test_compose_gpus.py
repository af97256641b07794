"""`kit compose` in the docker runtime's three GPU modes, by the spec it produces: nvidia a device reservation
(count, or the manifest's indices as device_ids), cdi the compose spec's CDI syntax in ``devices``
(``nvidia.com/gpu=<index>``), devices this host's device nodes, the driver folder read-only and the environment
(the same arguments kit's container gets, kit.runtime.docker.gpus); each file parsed by docker-compose where it
is installed (its own schema, no engine needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from test_docker_gpus import UUIDS, fake_driver

from kit.compose import render_compose
from kit.errors import UsageError
from kit.manifest import load_manifest
from kit.runtime.docker import gpus

ROOT = Path(__file__).resolve().parents[2]
OEA = ROOT / "experiments" / "oea.yaml"


def _compose(tmp_path: Path, mode: str, gpus_line: bytes = b"  gpus: 2\n", extra: bytes = b"", *,
             check: bool = False) -> dict[str, Any]:
    raw = OEA.read_bytes().replace(b"  gpus: 8\n", gpus_line).replace(
        b"  host: 127.0.0.1\n", b"  host: 127.0.0.1\n  docker_gpus:\n    mode: " + mode.encode() + b"\n" + extra)
    text = render_compose(load_manifest(OEA, raw, allow_unpinned=True))
    exe = shutil.which("docker-compose")
    if check and exe is not None:
        (tmp_path / "compose.yaml").write_text(text)
        r = subprocess.run([exe, "-f", str(tmp_path / "compose.yaml"), "--project-directory", str(ROOT), "--profile",
                            "baseline", "config", "-q"],
                           cwd=ROOT, env={"HF_TOKEN": "x", "PATH": "/usr/bin:/bin"}, capture_output=True, text=True,
                           timeout=60, check=False)
        assert r.returncode == 0, r.stderr
    services: dict[str, Any] = yaml.safe_load(text)["services"]
    return services


def test_nvidia_mode_reserves_the_count_or_the_indices(tmp_path: Path) -> None:
    svc = _compose(tmp_path, "nvidia", check=True)["baseline"]
    assert svc["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]
    svc = _compose(tmp_path, "nvidia", b"  gpus: 2\n  gpu_indices: [1, 3]\n")["baseline"]
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["1", "3"]


def test_cdi_mode_names_cdi_devices(tmp_path: Path) -> None:
    svc = _compose(tmp_path, "cdi", check=True)["oea"]
    assert svc["devices"] == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"] and "deploy" not in svc
    assert "NVIDIA_VISIBLE_DEVICES=void" in svc["environment"] and svc["ulimits"]["memlock"] == -1
    assert _compose(tmp_path, "cdi", b"  gpus: all\n")["oea"]["devices"] == ["nvidia.com/gpu=all"]


def test_devices_mode_passes_this_hosts_nodes_and_driver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proc, dev, drv = fake_driver(tmp_path, {UUIDS[0]: 3, UUIDS[1]: 0})
    monkeypatch.setattr(gpus, "PROC_GPUS", proc)
    monkeypatch.setattr(gpus, "DEV", dev)
    svc = _compose(tmp_path, "devices", extra=f"    driver_dir: {drv}\n".encode(), check=True)["baseline"]
    assert svc["devices"] == [f"{dev}/nvidia3:/dev/nvidia3:rwm", f"{dev}/nvidia0:/dev/nvidia0:rwm",
                              f"{dev}/nvidiactl:/dev/nvidiactl:rwm", f"{dev}/nvidia-uvm:/dev/nvidia-uvm:rwm"]
    assert f"{drv}:{drv}:ro" in svc["volumes"] and "deploy" not in svc
    assert f"CUDA_VISIBLE_DEVICES={UUIDS[0]},{UUIDS[1]}" in svc["environment"]
    assert f"LD_LIBRARY_PATH={drv}/lib64" in svc["environment"]
    monkeypatch.setattr(gpus, "PROC_GPUS", tmp_path / "none")
    with pytest.raises(UsageError, match=r"server\.docker_gpus\.mode devices: no NVIDIA driver table") as e:
        _compose(tmp_path, "devices", extra=f"    driver_dir: {drv}\n".encode())
    assert "generate the compose file on the GPU machine" in str(e.value.hint)
