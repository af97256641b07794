"""A configurable ``GpuProbe`` for tests (moved here from kit/nvml.py: only tests use it)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.nvml import MIB, Domain, GpuProcess, Memory, NoDriverError, NvmlError, UnsupportedError, Which


@dataclass
class FakeGpu:
    """One fake GPU. Memory is in MiB. From ``release_after_s`` seconds after the probe's first memory
    reading, the GPU reads ``used_mib=0`` and no processes (a holder that exits mid-poll).
    ``extras`` overrides env-capture answers by method name; an exception instance there is raised."""

    uuid: str
    name: str = "NVIDIA H200"
    total_mib: int = 143771
    reserved_mib: int | None = 615
    used_mib: int = 0
    processes: list[GpuProcess] = field(default_factory=list)
    mig: tuple[int, int] | None = None  # None: MIG not supported
    compute_capability: tuple[int, int] | None = (9, 0)  # None: the query is not supported
    release_after_s: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)


_EXTRA_DEFAULTS: dict[str, Any] = {
    "serial": "1650000000000",
    "vbios": "96.00.AF.00.01",
    "pci_bus_id": "00000000:00:00.0",
    "persistence_mode": True,
    "ecc_mode": (True, True),
    "ecc_errors": 0,
    "power_limit_mw": 700000,
    "clock_mhz": 1980,
    "temperature_c": 30,
    "power_mw": 120000,
    "utilization": (0, 0),
    "pcie": 5,
    "nvlink_links": [True] * 18,
}


class FakeProbe:
    """A configurable ``GpuProbe`` for tests. ``no_driver=True`` makes ``init`` raise ``NoDriverError``."""

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        no_driver: bool = False,
        driver: str = "580.159.04",
        cuda: int = 13000,
        topology_level: int = 40,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gpus = gpus if gpus is not None else []
        self.no_driver = no_driver
        self.driver = driver
        self.cuda = cuda
        self.topology_level = topology_level
        self.clock = clock
        self.inits = 0
        self.memory_reads = 0
        self._t0: float | None = None

    @classmethod
    def idle(cls, n: int, **kwargs: Any) -> FakeProbe:
        return cls([FakeGpu(uuid=f"GPU-{i:08x}-fake-0000-0000-{i:012x}") for i in range(n)], **kwargs)

    def _gpu(self, index: int) -> FakeGpu:
        if not 0 <= index < len(self.gpus):
            raise NvmlError("Invalid Argument", 2)
        return self.gpus[index]

    def _released(self, gpu: FakeGpu) -> bool:
        if gpu.release_after_s is None or self._t0 is None:
            return False
        return self.clock() - self._t0 >= gpu.release_after_s

    def _extra(self, index: int, key: str) -> Any:
        value = self._gpu(index).extras.get(key, _EXTRA_DEFAULTS[key])
        if isinstance(value, BaseException):
            raise value
        return value

    def init(self) -> None:
        if self.no_driver:
            raise NoDriverError("NVML Shared Library Not Found", 12)
        self.inits += 1

    def shutdown(self) -> None:
        self.inits = max(0, self.inits - 1)

    def driver_version(self) -> str:
        return self.driver

    def cuda_driver_version(self) -> int:
        return self.cuda

    def nvml_version(self) -> str:
        return f"13.{self.driver}"

    def device_count(self) -> int:
        return len(self.gpus)

    def uuid(self, index: int) -> str:
        return self._gpu(index).uuid

    def name(self, index: int) -> str:
        return self._gpu(index).name

    def memory(self, index: int) -> Memory:
        gpu = self._gpu(index)
        if self._t0 is None:
            self._t0 = self.clock()
        self.memory_reads += 1
        used = 0 if self._released(gpu) else gpu.used_mib
        reserved = gpu.reserved_mib or 0
        free = gpu.total_mib - used - reserved
        return Memory(
            total=gpu.total_mib * MIB,
            free=free * MIB,
            used=used * MIB,
            reserved=None if gpu.reserved_mib is None else reserved * MIB,
            v1_used=(used + reserved) * MIB,
            version=1 if gpu.reserved_mib is None else 2,
        )

    def processes(self, index: int) -> list[GpuProcess]:
        gpu = self._gpu(index)
        return [] if self._released(gpu) else list(gpu.processes)

    def mig_mode(self, index: int) -> tuple[int, int]:
        mig = self._gpu(index).mig
        if mig is None:
            raise UnsupportedError("Not Supported", 3)
        return mig

    def compute_capability(self, index: int) -> tuple[int, int]:
        cc = self._gpu(index).compute_capability
        if cc is None:
            raise UnsupportedError("Not Supported", 3)
        return cc

    def serial(self, index: int) -> str:
        return str(self._extra(index, "serial"))

    def vbios(self, index: int) -> str:
        return str(self._extra(index, "vbios"))

    def pci_bus_id(self, index: int) -> str:
        return str(self._extra(index, "pci_bus_id"))

    def persistence_mode(self, index: int) -> bool:
        return bool(self._extra(index, "persistence_mode"))

    def ecc_mode(self, index: int) -> tuple[bool, bool]:
        cur, pending = self._extra(index, "ecc_mode")
        return bool(cur), bool(pending)

    def ecc_errors(self, index: int, *, uncorrected: bool, aggregate: bool) -> int:
        return int(self._extra(index, "ecc_errors"))

    def power_limit_mw(self, index: int, *, default: bool) -> int:
        return int(self._extra(index, "power_limit_mw"))

    def clock_mhz(self, index: int, domain: Domain, which: Which) -> int:
        return int(self._extra(index, "clock_mhz"))

    def temperature_c(self, index: int) -> int:
        return int(self._extra(index, "temperature_c"))

    def power_mw(self, index: int) -> int:
        return int(self._extra(index, "power_mw"))

    def utilization(self, index: int) -> tuple[int, int]:
        gpu, mem = self._extra(index, "utilization")
        return int(gpu), int(mem)

    def pcie(self, index: int, *, width: bool, which: Which) -> int:
        return 16 if width else int(self._extra(index, "pcie"))

    def topology(self, a: int, b: int) -> int:
        self._gpu(a), self._gpu(b)
        return 0 if a == b else self.topology_level

    def nvlink_links(self, index: int) -> list[bool | None]:
        return list(self._extra(index, "nvlink_links"))
