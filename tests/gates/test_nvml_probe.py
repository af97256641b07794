"""NvmlProbe over a stubbed pynvml: the right calls, the right fields, NVML errors mapped."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml
import pytest
from gate_helpers import make_manifest

from kit.envinfo import capture_gpus
from kit.gates.gpu import check_gpus
from kit.nvml import NvmlProbe

MIB = 1 << 20


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Two idle H200s as pynvml would report them; NVLink has 18 links, then Invalid Argument."""
    state: dict[str, Any] = {"inits": 0, "procs": {0: [], 1: []}}

    def err(code: int) -> Any:
        def raise_it(*_: Any, **__: Any) -> Any:
            raise pynvml.NVMLError(code)
        return raise_it

    def memory(h: int, version: int | None = None) -> Any:
        if version == pynvml.nvmlMemory_v2:
            return SimpleNamespace(total=143771 * MIB, free=143156 * MIB, used=0, reserved=615 * MIB)
        return SimpleNamespace(total=143771 * MIB, free=143156 * MIB, used=615 * MIB)

    def nvlink(h: int, link: int) -> int:
        if link >= 18:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return 1

    stubs = {
        "nvmlInit": lambda: state.__setitem__("inits", state["inits"] + 1),
        "nvmlShutdown": lambda: state.__setitem__("inits", state["inits"] - 1),
        "nvmlSystemGetDriverVersion": lambda: "580.159.04",
        "nvmlSystemGetCudaDriverVersion": lambda: 13000,
        "nvmlSystemGetNVMLVersion": lambda: "13.580.159.04",
        "nvmlDeviceGetCount": lambda: 2,
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetUUID": lambda h: f"GPU-{h}aaaaaaa-bbbb",
        "nvmlDeviceGetName": lambda h: "NVIDIA H200",
        "nvmlDeviceGetMemoryInfo": memory,
        "nvmlDeviceGetComputeRunningProcesses": lambda h: state["procs"][h],
        "nvmlDeviceGetMigMode": err(pynvml.NVML_ERROR_NOT_SUPPORTED),
        "nvmlDeviceGetCudaComputeCapability": lambda h: (9, 0),
        "nvmlDeviceGetSerial": lambda h: "1650224000001",
        "nvmlDeviceGetVbiosVersion": lambda h: "96.00.AF.00.01",
        "nvmlDeviceGetPciInfo": lambda h: SimpleNamespace(busId=b"00000000:18:00.0"),
        "nvmlDeviceGetPersistenceMode": lambda h: 1,
        "nvmlDeviceGetEccMode": lambda h: [1, 1],
        "nvmlDeviceGetTotalEccErrors": err(pynvml.NVML_ERROR_NO_PERMISSION),
        "nvmlDeviceGetEnforcedPowerLimit": lambda h: 700000,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda h: 700000,
        "nvmlDeviceGetClockInfo": lambda h, t: 345 if t == pynvml.NVML_CLOCK_SM else 3201,
        "nvmlDeviceGetMaxClockInfo": lambda h, t: 1980 if t == pynvml.NVML_CLOCK_SM else 3201,
        "nvmlDeviceGetTemperature": lambda h, s: 31,
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda h: 5,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda h: 16,
        "nvmlDeviceGetTopologyCommonAncestor": lambda a, b: pynvml.NVML_TOPOLOGY_SYSTEM,
        "nvmlDeviceGetNvLinkState": nvlink,
    }
    for name, fn in stubs.items():
        monkeypatch.setattr(pynvml, name, fn)
    return state


def test_capture_through_nvml_probe(fake_nvml: dict[str, Any]) -> None:
    doc = capture_gpus(NvmlProbe())
    assert fake_nvml["inits"] == 0
    assert doc["available"] and doc["cuda_driver_version"] == "13.0" and doc["count"] == 2
    gpu = doc["gpus"][1]
    assert gpu["uuid"] == "GPU-1aaaaaaa-bbbb" and gpu["pci_bus_id"] == "00000000:18:00.0"
    assert gpu["memory"] == {"total_mib": 143771, "free_mib": 143156, "used_mib": 0, "reserved_mib": 615,
                             "v1_used_mib": 615, "memory_info_version": 2}
    assert gpu["clocks_mhz"] == {"sm_current": 345, "sm_max": 1980, "mem_current": 3201, "mem_max": 3201}
    assert gpu["pcie"] == {"generation_current": 5, "generation_max": 5, "width_current": 16, "width_max": 16}
    assert gpu["ecc_mode"] == {"current": True, "pending": True}
    assert gpu["ecc_errors"]["aggregate_uncorrected"] is None
    assert gpu["unavailable"]["ecc_errors.aggregate_uncorrected"] == "Insufficient Permissions"
    assert gpu["mig_mode"] is None and gpu["unavailable"]["mig_mode"] == "Not Supported"
    assert len(gpu["nvlink"]) == 18 and all(link["active"] for link in gpu["nvlink"])
    assert doc["topology"]["common_ancestor"] == [{"a": 0, "b": 1, "level": "SYSTEM", "code": 50}]


def test_gate_through_nvml_probe(fake_nvml: dict[str, Any]) -> None:
    check, gpus = check_gpus(make_manifest(gpus=2), NvmlProbe())
    assert check.ok and [g["uuid"] for g in gpus] == ["GPU-0aaaaaaa-bbbb", "GPU-1aaaaaaa-bbbb"]
    fake_nvml["procs"][1] = [SimpleNamespace(pid=77777777, usedGpuMemory=None)]
    check, _ = check_gpus(make_manifest(gpus=2, gpu_deadline_s=0.02), NvmlProbe())
    assert not check.ok and "GPU 1 (GPU-1aaaaaaa…): 0 MiB used by 1 process: PID 77777777" in check.message
    assert fake_nvml["inits"] == 0


def test_compute_capability_through_nvml_probe(fake_nvml: dict[str, Any]) -> None:
    assert NvmlProbe().compute_capability(1) == (9, 0)
    assert check_gpus(make_manifest(gpus=2, compute_capability=["9.0"]), NvmlProbe())[0].ok
    check, _ = check_gpus(make_manifest(gpus=2, compute_capability=["12.0"]), NvmlProbe())
    assert not check.ok and "has compute capability 9.0; the manifest is for 12.0" in check.message


def test_v2_missing_falls_back_to_v1(fake_nvml: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def v1_only(h: int, version: int | None = None) -> Any:
        if version is not None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        return SimpleNamespace(total=100 * MIB, free=90 * MIB, used=10 * MIB)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", v1_only)
    mem = NvmlProbe().memory(0)
    assert mem.version == 1 and mem.used == 10 * MIB and mem.reserved is None
