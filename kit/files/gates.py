"""gates.jsonl: one line per gate phase ("before" a start, "after" a stop, "doctor"), as
``kit.gates.result.GateReport.as_dict`` writes it. Lines written before ``schema_version`` existed
read as version 1."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue
from typing_extensions import TypedDict

SCHEMA_VERSION = 1


class GpuIdentity(TypedDict):
    """A GPU the gate identified for the server (what a DeviceRequest or CUDA_VISIBLE_DEVICES names)."""

    index: int
    uuid: str
    name: str


class CheckLine(BaseModel):
    """One check: what was checked, whether it passed, the evidence, and how to fix it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    ok: bool
    message: str
    hint: str | None
    evidence: dict[str, JsonValue]  # each gate's own (kit.gates.gpu.GpuEvidence, ...PortsEvidence, ...)
    started: str  # UTC, kit.plumbing.clock format
    duration_s: float


class GatesLine(BaseModel):
    """One line of gates.jsonl."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = SCHEMA_VERSION
    phase: Literal["before", "after", "doctor"]
    run_id: str | None
    ok: bool
    started: str
    duration_s: float
    gpus: list[GpuIdentity]
    checks: list[CheckLine]
