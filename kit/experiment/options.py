"""What a run is asked to do (``RunOptions``), what it reports while it runs (``Events``) and what it
returns (``RunResult``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kit.bundle import Bundle
from kit.experiment.stoprule import StopRule
from kit.files import JsonObject
from kit.plan import Cell, LevelPlan
from kit.runtime import Runtime


class Events(Protocol):
    """What the loop reports while it runs (the CLI renders it)."""

    def message(self, text: str) -> None: ...
    def cell_started(self, cell: Cell, position: int, total: int) -> None: ...
    def level_started(self, cell: Cell, level: LevelPlan) -> None: ...
    def level_progress(self, cell: Cell, level: LevelPlan, done: int, total: int, tokens_per_s: float,
                       eta_s: float | None) -> None: ...
    def level_done(self, cell: Cell, level: LevelPlan, ok: int, errors: int, client_bound: bool) -> None: ...
    def cell_done(self, cell: Cell, status: str, reason: str | None) -> None: ...


class QuietEvents:
    def message(self, text: str) -> None:
        pass

    def cell_started(self, cell: Cell, position: int, total: int) -> None:
        pass

    def level_started(self, cell: Cell, level: LevelPlan) -> None:
        pass

    def level_progress(self, cell: Cell, level: LevelPlan, done: int, total: int, tokens_per_s: float,
                       eta_s: float | None) -> None:
        pass

    def level_done(self, cell: Cell, level: LevelPlan, ok: int, errors: int, client_bound: bool) -> None:
        pass

    def cell_done(self, cell: Cell, status: str, reason: str | None) -> None:
        pass


@dataclass
class RunOptions:
    out_dir: Path = Path("results")
    resume: Path | None = None
    allow_unsigned: bool = False
    allow_unpinned: bool = False
    trust: list[Path] = field(default_factory=list)
    key: Path | None = None
    argv: list[str] = field(default_factory=list)
    runtime: Runtime | None = None  # injected in tests; default from the manifest
    # the command printed to continue an interrupted run (bundle root, runner key): kit reproduce gives its own
    resume_hint: Callable[[Path, Ed25519PublicKey], str] | None = None
    redo: tuple[str, ...] = ()  # with resume: re-run the cells whose attempt was client-bound/failed (kit.bundle.redo)
    stop_rule: StopRule | None = None  # the caller's looks that may stop the run (kit reproduce --until-decided)
    # the caller's files written into a new bundle before its start checkpoint, which vouches for them (kit reproduce:
    # the source's provenance, so that a resume can tell which source a reproduction not yet sealed is of)
    prepare: Callable[[Bundle], object] | None = None


@dataclass
class RunResult:
    bundle: Path
    status: str  # complete | failed | interrupted
    verdicts: list[str]
    failed_cells: dict[str, str]
    notices: list[str] = field(default_factory=list)
    summary: JsonObject = field(default_factory=dict)
    next_steps: list[str] = field(default_factory=list)  # printed after the verdicts: what would decide them
