"""NVML's readings of the cell's GPUs at one tick, through ``kit.nvml``'s small interface (a query a GPU does not
support reads None; the fake probe in tests/gates/fake_nvml.py stands in for a driver in tests)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from kit.files.telemetry import GpuSample
from kit.nvml import MIB, GpuProbe, NoDriverError, NvmlError, UnsupportedError

T = TypeVar("T")


def _or_none(read: Callable[[], T]) -> T | None:
    try:
        return read()
    except UnsupportedError:
        return None


def read_gpu(probe: GpuProbe, index: int) -> GpuSample:
    """One GPU's clocks, power, memory and utilisation now; ``NvmlError`` (not UnsupportedError) propagates."""
    power = _or_none(lambda: probe.power_mw(index))
    memory = _or_none(lambda: probe.memory(index))
    util = _or_none(lambda: probe.utilization(index))
    return GpuSample(
        index=index,
        sm_clock_mhz=_or_none(lambda: probe.clock_mhz(index, "sm", "current")),
        mem_clock_mhz=_or_none(lambda: probe.clock_mhz(index, "mem", "current")),
        power_w=None if power is None else power / 1000.0,
        memory_used_mib=None if memory is None else memory.used // MIB,
        util_pct=None if util is None else util[0],
        mem_util_pct=None if util is None else util[1],
        temperature_c=_or_none(lambda: probe.temperature_c(index)),
    )


def open_probe(probe: GpuProbe, indices: list[int]) -> str | None:
    """Initialise NVML for sampling ``indices``; the reason it cannot be (None: ready)."""
    if not indices:
        return None
    try:
        probe.init()
        count = probe.device_count()
    except NoDriverError as e:
        return f"no NVIDIA driver: {e.reason}"
    except NvmlError as e:
        return f"NVML failed: {e.reason}"
    missing = [i for i in indices if not 0 <= i < count]
    if missing:
        probe.shutdown()
        return f"NVML index {missing[0]} is not among the {count} GPU(s) NVML sees"
    return None
