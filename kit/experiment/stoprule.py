"""A caller's rule to stop a run early (``RunOptions.stop_rule``): `kit reproduce --until-decided` looks at its
verdict after each block of the new run and stops once it is decided. The loop knows only this interface, never
the rule (kit.reproduce imports kit.experiment, not the other way round): the rule writes the files its looks need
before the start checkpoint, and each look before the checkpoint of the cell that completed its block, so that a
SIGKILL never loses one; the run records the rule's flag in run.json, and a resume must name the same rule."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from kit.bundle import Bundle
from kit.errors import KitError, UsageError
from kit.files.read import read_file
from kit.files.run import RunFile
from kit.manifest import Manifest
from kit.plan import Plan


class Stopper(Protocol):
    """The looks of one run: each one due taken and written; whether one of them stopped the run."""

    @property
    def stopped(self) -> bool: ...

    def take_due(self) -> list[str]:
        """Every look whose block is complete and not yet taken, each written to the bundle: the lines to print."""
        ...


class StopRule(Protocol):
    """What RunOptions carries: the flag run.json records (true), and the looks of a run."""

    @property
    def flag(self) -> str: ...

    def prepare(self, bundle: Bundle) -> None:
        """Write what the looks read into a new bundle, before its start checkpoint."""
        ...

    def start(self, m: Manifest, plan: Plan, bundle: Bundle) -> Stopper: ...


def same_rule(root: Path, rule: StopRule | None, how: str) -> None:
    """A resume must continue the run as it was started: with the stop rule it recorded (run.json's flags), and
    never add one to a run that ran without it. ``how``: what resumes a run with the rule (the hint)."""
    try:
        flags = read_file(root, "run.json", RunFile).flags.model_dump()
    except KitError:
        return  # no readable run.json: the resume itself says what is wrong with the bundle
    recorded = sorted(k for k, v in flags.items() if v is True and not k.startswith("allow_"))  # --allow-*: trust
    given = [rule.flag] if rule is not None else []
    if recorded == given:
        return
    if recorded:
        raise UsageError(f"{root} was started with --{recorded[0].replace('_', '-')} (run.json's flags): its looks "
                         "decide which cells run, so it must be resumed with it", hint=how)
    raise UsageError(f"--{given[0].replace('_', '-')}: {root} was started without it (its cells ran without "
                     "looks); resume it as it was started", hint="leave the flag out")
