"""``cells/<arm>-r<k>/cell.json``: one cell's state, written before, during and after it runs.

``kit_overhead_s`` is kit's own time in the cell: its wall time less the server's readiness, the levels'
walls and the stop (``overhead_parts`` keeps the terms).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from kit.files import JsonObject
from kit.files.base import BundleFile, Loose


class LevelOutcome(Loose):
    ok: int
    errors: int
    wall_s: float
    warmup_s: float | None = None  # the level's warm-up requests' wall time (absent in older bundles)
    client_bound: bool
    client_bound_reasons: list[str] = Field(default_factory=list)


class ServerStopped(Loose):
    """How the server ended (plus whatever the runtime adds: container state, group members)."""

    exit_code: int | None = None
    signal: str | None = None
    stop_s: float | None = None


class OverheadParts(Loose):
    cell_wall_s: float
    ready_s: float
    levels_wall_s: float
    warmup_s: float = 0.0  # the manifest's warm-up requests: load the server serves, not recorded
    stop_s: float


class CellFile(BundleFile):
    file_pattern: ClassVar[str] = "cells/*/cell.json"

    id: str
    arm: str
    repeat: int
    index: int
    status: str = "running"  # running | ok | failed | interrupted
    started: str | None = None
    finished: str | None = None
    reason: str | None = None
    hint: str | None = None
    exit_code: int | None = None
    gpu_temperature_start: JsonObject | None = None
    gpu_temperature_end: JsonObject | None = None
    ready_s: float | None = None
    levels: dict[str, LevelOutcome] = Field(default_factory=dict)
    serve_s: float | None = None
    stop: ServerStopped | None = None
    kit_overhead_s: float | None = None
    overhead_parts: OverheadParts | None = None
