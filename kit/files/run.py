"""``run.json``: who ran what, with which flags and trust, how it ended, and every resume."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from kit.files import JsonObject
from kit.files.base import BundleFile, Loose
from kit.files.reproduce import Reproduces

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class RunFlags(Loose):
    allow_unsigned: bool = False
    allow_unpinned: bool = False


class Redone(Loose):
    """A cell attempt a ``--redo`` (or, during the run, ``design.redo_client_bound``) replaced (``kit.bundle.redo``):
    kept under ``attempt``, excluded from the statistics, its reason checked again by ``kit verify``."""

    cell: str
    reason: Literal["client-bound", "failed"]
    attempt: str = Field(pattern=r"^(failed|redone)/[A-Za-z0-9][A-Za-z0-9._-]*-a[0-9]+$")  # redone/<cell>-a<n>
    why: str  # the evidence: "level-4: ..." or "status failed"


class Resumption(Loose):
    """One ``kit run --resume``: when, how, and what was known of the bundle before."""

    at: str
    argv: list[str] = Field(default_factory=list)
    kit_version: str = ""
    trust: JsonObject = Field(default_factory=dict)
    provenance_before: str = ""
    environment: str = ""
    # a resume after a run that never ended (kit.bundle.resume): what it found that no checkpoint vouched for
    set_aside: list[str] = Field(default_factory=list)  # "FROM -> TO: why" (moved, never deleted)
    restored: list[str] = Field(default_factory=list)  # files put back as last signed (run.json)
    dropped: list[str] = Field(default_factory=list)  # summary, report, plots: recomputed when the run ends
    stopped: list[str] = Field(default_factory=list)  # servers the stopped run left running, stopped by this resume
    redone: list[Redone] = Field(default_factory=list)  # cells set aside by --redo, re-run by this resume


class FailedCell(Loose):
    exit_code: int
    reason: str


class RunFile(BundleFile):
    """Only ``run_id`` is required: it is what makes a directory a kit bundle."""

    file_pattern: ClassVar[str] = "run.json"

    # what Bundle.create makes (6 hex) or is given (one safe path component); never a path: readers build names from it
    run_id: str = Field(pattern=RUN_ID_PATTERN)
    experiment: str = ""
    kit_version: str = ""
    status: str = "running"  # running | complete | failed | interrupted
    started: str | None = None
    finished: str | None = None
    argv: list[str] = Field(default_factory=list)
    manifest_source: str | None = None
    trust: JsonObject = Field(default_factory=dict)
    flags: RunFlags = Field(default_factory=RunFlags)
    unpinned_bases: list[str] = Field(default_factory=list)
    runner_key: str | None = None
    resumed: list[Resumption] = Field(default_factory=list)
    redone: list[Redone] = Field(default_factory=list)  # design.redo_client_bound: attempts re-measured in the run
    failed_cells: dict[str, FailedCell] = Field(default_factory=dict)
    summary_error: str | None = None  # every cell ran, but the summary could not be computed (status failed)
    reproduces: Reproduces | None = None  # `kit reproduce`: the source bundle this run re-ran (reproduce.json)
