"""A gate check's result and a phase's report."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from kit.errors import GateFailed


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Check:
    """One check: what was checked, whether it passed, the evidence, and how to fix it."""

    name: str
    ok: bool
    message: str
    hint: str | None
    evidence: dict[str, Any]
    started: str  # UTC ISO 8601
    duration_s: float


class Timer:
    """Stamps a check's start (UTC) and measures its duration (monotonic)."""

    def __init__(self) -> None:
        self.started = utc_now()
        self._t0 = time.monotonic()

    def check(self, name: str, ok: bool, message: str, hint: str | None, evidence: dict[str, Any]) -> Check:
        return Check(name, ok, message, hint, evidence, self.started, round(time.monotonic() - self._t0, 6))


@dataclass
class GateReport:
    """Every check of one phase ("before", "after" or "doctor") and the GPUs identified for the server."""

    phase: str
    checks: list[Check]
    gpus: list[dict[str, Any]] = field(default_factory=list)  # {index, uuid, name}, for a DeviceRequest
    run_id: str | None = None
    started: str = field(default_factory=utc_now)
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def as_dict(self) -> dict[str, Any]:
        """One line of gates.jsonl."""
        return {
            "phase": self.phase,
            "run_id": self.run_id,
            "ok": self.ok,
            "started": self.started,
            "duration_s": self.duration_s,
            "gpus": self.gpus,
            "checks": [asdict(c) for c in self.checks],
        }

    def raise_if_failed(self) -> None:
        """Raise ``GateFailed`` (exit 5) naming every failed check, its evidence in words and its fix."""
        failed = self.failed
        if not failed:
            return
        lines = [f"{len(failed)} gate check(s) failed ({self.phase}):"]
        lines += [f"  {c.name}: {c.message}" for c in failed]
        hints = list(dict.fromkeys(c.hint for c in failed if c.hint))
        raise GateFailed("\n".join(lines), hint="; ".join(hints) or None)
