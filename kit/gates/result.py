"""What the gates return: one ``Check`` per gate (with its evidence and timing) and one ``GateReport``
per phase, whose ``as_dict()`` is a line of gates.jsonl (``kit.files.gates.GatesLine``)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal

from kit.errors import GateFailed
from kit.files.gates import GatesLine, GpuIdentity
from kit.plumbing.clock import utc_now
from kit.plumbing.jsontypes import JsonObject

Phase = Literal["before", "after", "doctor"]

__all__ = ["Check", "GateReport", "GpuIdentity", "Phase", "Timer", "utc_now"]


@dataclass
class Check:
    """One check: what was checked, whether it passed, the evidence, and how to fix it.

    ``evidence`` is the gate's own TypedDict (``GpuEvidence``, ``PortsEvidence``, ...)."""

    name: str
    ok: bool
    message: str
    hint: str | None
    evidence: Mapping[str, object]
    started: str  # UTC, kit.plumbing.clock format
    duration_s: float


class Timer:
    """Stamps a check's start (UTC) and measures its duration (monotonic)."""

    def __init__(self) -> None:
        self.started = utc_now()
        self._t0 = time.monotonic()

    def check(self, name: str, ok: bool, message: str, hint: str | None, evidence: Mapping[str, object]) -> Check:
        return Check(name, ok, message, hint, evidence, self.started, round(time.monotonic() - self._t0, 6))


@dataclass
class GateReport:
    """Every check of one phase ("before", "after" or "doctor") and the GPUs identified for the server."""

    phase: Phase
    checks: list[Check]
    gpus: list[GpuIdentity] = field(default_factory=list)  # for a DeviceRequest or CUDA_VISIBLE_DEVICES
    run_id: str | None = None
    started: str = field(default_factory=utc_now)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def line(self) -> GatesLine:
        """This report as a line of gates.jsonl."""
        return GatesLine.model_validate({
            "phase": self.phase,
            "run_id": self.run_id,
            "ok": self.ok,
            "started": self.started,
            "duration_s": self.duration_s,
            "gpus": self.gpus,
            "checks": [asdict(c) for c in self.checks],
        })

    def as_dict(self) -> JsonObject:
        """One line of gates.jsonl, ready for ``json.dumps``."""
        doc: JsonObject = self.line().model_dump(mode="json")
        return doc

    def raise_if_failed(self) -> None:
        """Raise ``GateFailed`` (exit 5) naming every failed check, its evidence in words and its fix."""
        failed = self.failed
        if not failed:
            return
        lines = [f"{len(failed)} gate check(s) failed ({self.phase}):"]
        lines += [f"  {c.name}: {c.message}" for c in failed]
        hints = list(dict.fromkeys(c.hint for c in failed if c.hint))
        raise GateFailed("\n".join(lines), hint="; ".join(hints) or None)
