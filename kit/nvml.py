"""NVML behind a small interface: what the gates and the environment capture need, and no more.

``NvmlProbe`` talks to the driver through nvidia-ml-py (``import pynvml``); tests use a configurable fake
(tests/gates/fake_nvml.py). Every NVML failure surfaces as an ``NvmlError``: ``NoDriverError`` when the
library or the driver is missing (never a traceback), ``UnsupportedError`` when a query is not supported
or not permitted on this GPU (callers record it as null with the reason).

Indices are NVML indices (PCI order), which can differ from ``CUDA_VISIBLE_DEVICES`` order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

from typing_extensions import TypedDict  # pydantic reads it (environment.json) only from typing_extensions on 3.11

MIB = 1024 * 1024

Domain = Literal["sm", "mem"]
Which = Literal["current", "max"]


class NvmlError(Exception):
    """An NVML call failed; ``reason`` is NVML's own words."""

    def __init__(self, reason: str, code: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.code = code


class NoDriverError(NvmlError):
    """No NVIDIA driver: the NVML library is missing or the kernel driver is not loaded."""


class UnsupportedError(NvmlError):
    """The query is not supported on this GPU, not permitted, or not present in this driver."""


class MemoryMib(TypedDict):
    """A GPU's memory in MiB, as the gates and environment.json record it."""

    total_mib: int
    free_mib: int
    used_mib: int
    reserved_mib: int | None
    v1_used_mib: int
    memory_info_version: int


@dataclass(frozen=True)
class Memory:
    """One GPU's memory in bytes. ``used`` is NVML v2 'used' (what nvidia-smi shows); ``v1_used`` is the
    older figure, which also counts memory the driver reserves (615 MiB on an idle H200)."""

    total: int
    free: int
    used: int
    reserved: int | None  # None when only v1 is available
    v1_used: int
    version: int = 2  # 1 when the driver has no v2 call and ``used`` is v1's

    def as_mib(self) -> MemoryMib:
        return MemoryMib(
            total_mib=self.total // MIB,
            free_mib=self.free // MIB,
            used_mib=self.used // MIB,
            reserved_mib=None if self.reserved is None else self.reserved // MIB,
            v1_used_mib=self.v1_used // MIB,
            memory_info_version=self.version,
        )


@dataclass(frozen=True)
class GpuProcess:
    """A compute process as NVML lists it (host PIDs; empty when the caller is in another PID namespace)."""

    pid: int
    used_bytes: int | None  # None when NVML cannot tell


class GpuProbe(Protocol):
    """What kit asks of NVML. Every method may raise ``NvmlError``; ``init`` raises ``NoDriverError``."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...  # major*1000 + minor*10, e.g. 13000
    def nvml_version(self) -> str: ...
    def device_count(self) -> int: ...
    # identity and the gate's readings
    def uuid(self, index: int) -> str: ...
    def name(self, index: int) -> str: ...
    def memory(self, index: int) -> Memory: ...
    def processes(self, index: int) -> list[GpuProcess]: ...
    def mig_mode(self, index: int) -> tuple[int, int]: ...  # (current, pending); raises UnsupportedError without MIG
    def compute_capability(self, index: int) -> tuple[int, int]: ...  # CUDA (major, minor), e.g. (12, 0)
    # extras for the environment capture
    def serial(self, index: int) -> str: ...
    def vbios(self, index: int) -> str: ...
    def pci_bus_id(self, index: int) -> str: ...
    def persistence_mode(self, index: int) -> bool: ...
    def ecc_mode(self, index: int) -> tuple[bool, bool]: ...  # (current, pending)
    def ecc_errors(self, index: int, *, uncorrected: bool, aggregate: bool) -> int: ...
    def power_limit_mw(self, index: int, *, default: bool) -> int: ...  # enforced, or the default limit
    def clock_mhz(self, index: int, domain: Domain, which: Which) -> int: ...
    def temperature_c(self, index: int) -> int: ...
    # the telemetry sampler's readings during a level (kit.telemetry)
    def power_mw(self, index: int) -> int: ...  # the board's power draw now
    def utilization(self, index: int) -> tuple[int, int]: ...  # (GPU %, memory-bandwidth %) over NVML's last window
    def pcie(self, index: int, *, width: bool, which: Which) -> int: ...  # generation, or link width
    def topology(self, a: int, b: int) -> int: ...  # NVML_TOPOLOGY_* level of the common ancestor
    def nvlink_links(self, index: int) -> list[bool | None]: ...  # per link: active, or None if unknown


# --------------------------------------------------------------------------- the real one


def _pynvml() -> Any:
    try:
        import pynvml
    except ImportError:
        raise NoDriverError("nvidia-ml-py (module pynvml) is not installed") from None
    return pynvml


class NvmlProbe:
    """``GpuProbe`` over nvidia-ml-py. NVML's init is reference-counted, so nested sessions are fine."""

    def __init__(self) -> None:
        self._nv: Any = None
        self._handles: dict[int, Any] = {}

    @property
    def nv(self) -> Any:
        """The pynvml module (imported on first use; NoDriverError if nvidia-ml-py is missing)."""
        if self._nv is None:
            self._nv = _pynvml()
        return self._nv

    def _call(self, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        nv = self.nv
        fn = getattr(nv, fn_name, None)
        if fn is None:
            raise UnsupportedError(f"{fn_name} is not in this nvidia-ml-py")
        try:
            return fn(*args, **kwargs)
        except nv.NVMLError as e:
            raise _map_error(nv, e) from None

    def _h(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._call("nvmlDeviceGetHandleByIndex", index)
        return self._handles[index]

    def init(self) -> None:
        self._call("nvmlInit")

    def shutdown(self) -> None:
        self._handles.clear()
        try:
            self._call("nvmlShutdown")
        except NvmlError:
            pass

    def driver_version(self) -> str:
        return str(self._call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> int:
        return int(self._call("nvmlSystemGetCudaDriverVersion"))

    def nvml_version(self) -> str:
        return str(self._call("nvmlSystemGetNVMLVersion"))

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def uuid(self, index: int) -> str:
        return str(self._call("nvmlDeviceGetUUID", self._h(index)))

    def name(self, index: int) -> str:
        return str(self._call("nvmlDeviceGetName", self._h(index)))

    def memory(self, index: int) -> Memory:
        h = self._h(index)
        v1 = self._call("nvmlDeviceGetMemoryInfo", h)
        try:
            v2 = self._call("nvmlDeviceGetMemoryInfo", h, version=self.nv.nvmlMemory_v2)
        except UnsupportedError:
            return Memory(total=v1.total, free=v1.free, used=v1.used, reserved=None, v1_used=v1.used, version=1)
        return Memory(total=v2.total, free=v2.free, used=v2.used, reserved=v2.reserved, v1_used=v1.used)

    def processes(self, index: int) -> list[GpuProcess]:
        procs = self._call("nvmlDeviceGetComputeRunningProcesses", self._h(index))
        return [GpuProcess(pid=int(p.pid), used_bytes=_opt_int(p.usedGpuMemory)) for p in procs]

    def mig_mode(self, index: int) -> tuple[int, int]:
        cur, pending = self._call("nvmlDeviceGetMigMode", self._h(index))
        return int(cur), int(pending)

    def compute_capability(self, index: int) -> tuple[int, int]:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", self._h(index))
        return int(major), int(minor)

    def serial(self, index: int) -> str:
        return str(self._call("nvmlDeviceGetSerial", self._h(index)))

    def vbios(self, index: int) -> str:
        return str(self._call("nvmlDeviceGetVbiosVersion", self._h(index)))

    def pci_bus_id(self, index: int) -> str:
        bus_id = self._call("nvmlDeviceGetPciInfo", self._h(index)).busId
        return bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)

    def persistence_mode(self, index: int) -> bool:
        return bool(self._call("nvmlDeviceGetPersistenceMode", self._h(index)))

    def ecc_mode(self, index: int) -> tuple[bool, bool]:
        cur, pending = self._call("nvmlDeviceGetEccMode", self._h(index))
        return bool(cur), bool(pending)

    def ecc_errors(self, index: int, *, uncorrected: bool, aggregate: bool) -> int:
        nv = self.nv
        kind = nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED if uncorrected else nv.NVML_MEMORY_ERROR_TYPE_CORRECTED
        counter = nv.NVML_AGGREGATE_ECC if aggregate else nv.NVML_VOLATILE_ECC
        return int(self._call("nvmlDeviceGetTotalEccErrors", self._h(index), kind, counter))

    def power_limit_mw(self, index: int, *, default: bool) -> int:
        fn = "nvmlDeviceGetPowerManagementDefaultLimit" if default else "nvmlDeviceGetEnforcedPowerLimit"
        return int(self._call(fn, self._h(index)))

    def clock_mhz(self, index: int, domain: Domain, which: Which) -> int:
        kind = self.nv.NVML_CLOCK_SM if domain == "sm" else self.nv.NVML_CLOCK_MEM
        fn = "nvmlDeviceGetClockInfo" if which == "current" else "nvmlDeviceGetMaxClockInfo"
        return int(self._call(fn, self._h(index), kind))

    def temperature_c(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetTemperature", self._h(index), self.nv.NVML_TEMPERATURE_GPU))

    def power_mw(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetPowerUsage", self._h(index)))

    def utilization(self, index: int) -> tuple[int, int]:
        u = self._call("nvmlDeviceGetUtilizationRates", self._h(index))
        return int(u.gpu), int(u.memory)

    def pcie(self, index: int, *, width: bool, which: Which) -> int:
        what = "Width" if width else "Generation"
        fn = f"nvmlDevice{'GetCurr' if which == 'current' else 'GetMax'}PcieLink{what}"
        return int(self._call(fn, self._h(index)))

    def topology(self, a: int, b: int) -> int:
        return int(self._call("nvmlDeviceGetTopologyCommonAncestor", self._h(a), self._h(b)))

    def nvlink_links(self, index: int) -> list[bool | None]:
        """State of each NVLink link, up to the first link NVML says does not exist."""
        states: list[bool | None] = []
        for link in range(int(getattr(self.nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                states.append(bool(self._call("nvmlDeviceGetNvLinkState", self._h(index), link)))
            except UnsupportedError as e:
                if link == 0:
                    raise
                if e.code == getattr(self.nv, "NVML_ERROR_INVALID_ARGUMENT", 2):
                    break  # past the last link
                states.append(None)
        while states and states[-1] is None:
            states.pop()
        return states


def _opt_int(v: Any) -> int | None:
    return None if v is None else int(v)


_NO_DRIVER = ("NVML_ERROR_LIBRARY_NOT_FOUND", "NVML_ERROR_DRIVER_NOT_LOADED")
_UNSUPPORTED = (
    "NVML_ERROR_NOT_SUPPORTED",
    "NVML_ERROR_NO_PERMISSION",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
    "NVML_ERROR_INVALID_ARGUMENT",
    "NVML_ERROR_NOT_FOUND",
    "NVML_ERROR_ARGUMENT_VERSION_MISMATCH",
)


def _map_error(nv: Any, e: Any) -> NvmlError:
    code = getattr(e, "value", None)
    reason = str(e)
    if code in {getattr(nv, n, None) for n in _NO_DRIVER}:
        return NoDriverError(reason, code)
    if code in {getattr(nv, n, None) for n in _UNSUPPORTED}:
        return UnsupportedError(reason, code)
    return NvmlError(reason, code)
