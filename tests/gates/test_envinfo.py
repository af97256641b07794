"""Environment capture: the host, and the GPUs through FakeProbe (unsupported queries become null + reason)."""

from __future__ import annotations

import json

from fake_nvml import FakeGpu, FakeProbe

from kit import __version__
from kit.envinfo import capture_gpus, capture_host, gpu_temperatures
from kit.nvml import NvmlError, UnsupportedError


def test_capture_host_has_the_basics() -> None:
    host = capture_host()
    json.dumps(host)
    assert host["hostname"] and host["kernel"]["release"] and host["kernel"]["machine"]
    assert isinstance(host["cpu"]["logical_cores"], int) and host["cpu"]["usable_cores"] >= 1
    assert host["cpu"]["model"]
    assert host["memory_total_bytes"] > 0
    assert host["python"]["version"].count(".") == 2
    assert host["packages"]["pydantic"] and host["packages"]["nvidia-ml-py"]
    assert host["kit_version"] == __version__
    if host["cpu"]["governors"] is None:
        assert "cpu.governors" in host["unavailable"]


def test_capture_gpus_records_everything() -> None:
    doc = capture_gpus(FakeProbe.idle(2))
    json.dumps(doc)
    assert doc["available"] is True
    assert doc["driver_version"] == "580.159.04" and doc["cuda_driver_version"] == "13.0"
    assert doc["count"] == 2 and len(doc["gpus"]) == 2
    gpu = doc["gpus"][0]
    assert gpu["memory"]["used_mib"] == 0 and gpu["memory"]["v1_used_mib"] == 615
    assert gpu["memory"]["reserved_mib"] == 615
    assert gpu["ecc_errors"] == {"volatile_corrected": 0, "volatile_uncorrected": 0,
                                 "aggregate_corrected": 0, "aggregate_uncorrected": 0}
    assert set(gpu["clocks_mhz"]) == {"sm_current", "sm_max", "mem_current", "mem_max"}
    assert set(gpu["pcie"]) == {"generation_current", "generation_max", "width_current", "width_max"}
    assert set(gpu["power_limit_mw"]) == {"enforced", "default"}
    assert gpu["mig_mode"] is None and gpu["unavailable"] == {"mig_mode": "Not Supported"}
    assert gpu["compute_capability"] == "9.0"  # the fake H200's
    assert len(gpu["nvlink"]) == 18
    assert doc["topology"]["common_ancestor"] == [{"a": 0, "b": 1, "level": "NODE", "code": 40}]


def test_unsupported_and_forbidden_queries_are_null_with_the_reason() -> None:
    probe = FakeProbe([FakeGpu(uuid="GPU-x", mig=(0, 0), extras={
        "serial": UnsupportedError("Not Supported", 3),
        "ecc_errors": UnsupportedError("Insufficient Permissions", 4),
        "nvlink_links": UnsupportedError("Not Supported", 3),
    })])
    gpu = capture_gpus(probe)["gpus"][0]
    assert gpu["serial"] is None and gpu["unavailable"]["serial"] == "Not Supported"
    assert set(gpu["ecc_errors"].values()) == {None}
    assert gpu["unavailable"]["ecc_errors.volatile_corrected"] == "Insufficient Permissions"
    assert gpu["nvlink"] is None and gpu["unavailable"]["nvlink"] == "Not Supported"
    assert gpu["mig_mode"] == {"current": 0, "pending": 0}
    assert gpu["uuid"] == "GPU-x"


def test_no_driver() -> None:
    doc = capture_gpus(FakeProbe(no_driver=True))
    assert doc == {"available": False, "reason": "no NVIDIA driver found (NVML Shared Library Not Found)"}
    assert gpu_temperatures(FakeProbe(no_driver=True), [0])["available"] is False


def test_nvml_failing_midway_is_not_fatal() -> None:
    class Lost(FakeProbe):
        def device_count(self) -> int:
            raise NvmlError("GPU is lost", 15)

    assert capture_gpus(Lost()) == {"available": False, "reason": "NVML failed: GPU is lost"}


def test_temperatures() -> None:
    probe = FakeProbe.idle(3)
    probe.gpus[2].extras["temperature_c"] = UnsupportedError("Not Supported", 3)
    doc = gpu_temperatures(probe, [0, 2])
    assert doc["available"] is True and doc["time"].endswith("Z")
    assert doc["temperature_c"] == {"0": 30, "2": None}
    assert doc["unavailable"] == {"2": "Not Supported"}
    assert probe.inits == 0
