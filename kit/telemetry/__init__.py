"""What the server really ran: samplers of the server's Prometheus metrics and of NVML that run in a thread while
a level runs and append a time series to the cell (``kit.files.telemetry``); ``kit.stats.telemetry`` reads it,
the load driver never does."""

from __future__ import annotations

from kit.telemetry.sampler import LevelSampler, Limits

__all__ = ["LevelSampler", "Limits"]
