"""The environment capture taken on a real 2x H200 machine (tests/data/nvml/h200_env.json), checked everywhere.

It pins the shape of ``capture_host``/``capture_gpus`` output and the fact the GPU gate is built on: an idle
H200 reads 0 MiB used with NVML memory v2 while v1 says 615 MiB (the driver's reservation).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import FakeGpu, FakeProbe
from gate_helpers import make_manifest

from kit.gates.gpu import check_gpus

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "nvml" / "h200_env.json"


@pytest.fixture(scope="module")
def env() -> dict[str, Any]:
    return dict(json.loads(FIXTURE.read_text()))


def test_versions(env: dict[str, Any]) -> None:
    g = env["gpus"]
    assert g["available"] is True
    assert g["driver_version"] == "580.159.04"
    assert g["cuda_driver_version"] == "13.0" and g["cuda_driver_version_raw"] == 13000
    assert isinstance(g["nvml_version"], str) and g["nvml_version"].endswith("580.159.04")
    assert g["count"] == len(g["gpus"]) >= 1
    assert g["unavailable"] == {}


def test_every_gpu_has_every_field_with_the_right_type(env: dict[str, Any]) -> None:
    for i, gpu in enumerate(env["gpus"]["gpus"]):
        assert gpu["index"] == i
        assert gpu["name"] == "NVIDIA H200"
        assert gpu["uuid"].startswith("GPU-") and len(gpu["uuid"]) == 40
        assert isinstance(gpu["serial"], str) and isinstance(gpu["vbios"], str)
        assert isinstance(gpu["pci_bus_id"], str) and gpu["pci_bus_id"].count(":") == 2
        assert isinstance(gpu["persistence_mode"], bool)
        assert gpu["mig_mode"] == {"current": 0, "pending": 0}
        assert set(gpu["ecc_mode"]) == {"current", "pending"} and all(
            isinstance(v, bool) for v in gpu["ecc_mode"].values())
        assert set(gpu["ecc_errors"]) == {"volatile_corrected", "volatile_uncorrected", "aggregate_corrected",
                                          "aggregate_uncorrected"}
        assert all(isinstance(v, int) for v in gpu["ecc_errors"].values())
        assert gpu["power_limit_mw"]["enforced"] == gpu["power_limit_mw"]["default"] == 700000
        assert set(gpu["clocks_mhz"]) == {"sm_current", "sm_max", "mem_current", "mem_max"}
        assert gpu["clocks_mhz"]["sm_max"] == 1980 and gpu["clocks_mhz"]["mem_max"] == 3201
        assert all(isinstance(v, int) for v in gpu["clocks_mhz"].values())
        assert isinstance(gpu["temperature_c"], int) and 0 < gpu["temperature_c"] < 100
        assert gpu["pcie"] == {"generation_current": 5, "generation_max": 5, "width_current": 16, "width_max": 16}
        assert len(gpu["nvlink"]) == 18 and all(isinstance(link["active"], bool) for link in gpu["nvlink"])
        assert gpu["unavailable"] == {}


def test_idle_h200_reads_0_mib_v2_and_615_mib_v1(env: dict[str, Any]) -> None:
    for gpu in env["gpus"]["gpus"]:
        mem = gpu["memory"]
        assert mem["memory_info_version"] == 2
        assert mem["total_mib"] == 143771
        assert mem["used_mib"] == 0
        assert mem["reserved_mib"] == 615
        assert mem["v1_used_mib"] == 615  # v1 'used' counts the reservation: a v1 gate would never pass
        assert mem["free_mib"] + mem["reserved_mib"] + mem["used_mib"] in (mem["total_mib"], mem["total_mib"] - 1)


def test_topology_covers_every_pair(env: dict[str, Any]) -> None:
    n = env["gpus"]["count"]
    pairs = env["gpus"]["topology"]["common_ancestor"]
    assert len(pairs) == n * (n - 1) // 2
    for p in pairs:
        assert p["level"] in {"INTERNAL", "SINGLE", "MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM"}
        assert isinstance(p["code"], int)


def test_host_and_temperatures(env: dict[str, Any]) -> None:
    host = env["host"]
    assert host["kernel"]["machine"] == "x86_64" and host["python"]["version"].startswith("3.12")
    assert host["cpu"]["logical_cores"] == host["cpu"]["usable_cores"] == 32
    assert isinstance(host["memory_total_bytes"], int) and isinstance(host["packages"], dict)
    assert host["cpu"]["governors"] is None and "cpu.governors" in host["unavailable"]  # null with the reason
    temps = env["temperatures"]
    assert temps["available"] is True and set(temps["temperature_c"]) == {"0", "1"}


def test_gate_passes_on_the_captured_idle_gpus(env: dict[str, Any]) -> None:
    """A FakeProbe with the captured readings: the gate passes on v2 although v1 says 615 MiB."""
    gpus = [FakeGpu(uuid=g["uuid"], name=g["name"], total_mib=g["memory"]["total_mib"],
                    reserved_mib=g["memory"]["reserved_mib"], used_mib=g["memory"]["used_mib"])
            for g in env["gpus"]["gpus"]]
    check, found = check_gpus(make_manifest(gpus="all", gpu_name="NVIDIA H200", threshold_mib=256), FakeProbe(gpus))
    assert check.ok, check.message
    assert [g["v1_used_mib"] for g in check.evidence["gpus"]] == [615, 615]
    assert [g["uuid"] for g in found] == [g["uuid"] for g in env["gpus"]["gpus"]]
    strict = make_manifest(gpus="all", threshold_mib=614, gpu_deadline_s=0.01)
    assert check_gpus(strict, FakeProbe(gpus))[0].ok  # v2 used is 0: even a 0..614 threshold passes
