"""Expand a manifest into the ordered cells (arm x repeat) that a run executes."""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass

from kit.files import JsonObject
from kit.files.plan import PlanFile
from kit.manifest import Manifest


@dataclass(frozen=True)
class Cell:
    """One server lifetime: an arm, started once, driven through every level, stopped."""

    index: int
    arm: str
    repeat: int

    @property
    def id(self) -> str:
        return f"{self.arm}-r{self.repeat}"


@dataclass(frozen=True)
class LevelPlan:
    concurrency: int
    requests: int
    warmup: int


@dataclass(frozen=True)
class Plan:
    cells: tuple[Cell, ...]
    levels: tuple[LevelPlan, ...]
    order: str
    start: tuple[str, ...] | None = None  # abba: the arm order of the first block, drawn with design.seed

    def as_dict(self) -> JsonObject:
        """The plan as `kit plan --json` prints it (plan.json is ``to_file``, with its schema_version)."""
        out: JsonObject = {
            "order": self.order,
            "cells": [{**asdict(c), "id": c.id} for c in self.cells],
            "levels": [asdict(lv) for lv in self.levels],
        }
        if self.start is not None:
            out["start"] = list(self.start)
        return out

    def to_file(self) -> PlanFile:
        return PlanFile.model_validate(self.as_dict())


def make_plan(m: Manifest) -> Plan:
    arms = [a.name for a in m.arms]
    reps = range(1, m.design.repeats + 1)
    order = m.design.order
    start: tuple[str, ...] | None = None
    if order == "abba":
        first = list(arms)
        random.Random(f"abba:{m.design.seed}").shuffle(first)
        start = tuple(first)
        pairs = [(a, r) for r in reps for a in (first if r % 2 else first[::-1])]
    elif order == "blocked":
        pairs = [(a, r) for a in arms for r in reps]
    elif order == "counterbalanced":
        pairs = [(a, r) for r in reps for a in (arms if r % 2 else arms[::-1])]
    else:
        pairs = [(a, r) for r in reps for a in arms]
        if order == "random":
            random.Random(m.design.seed).shuffle(pairs)
    cells = tuple(Cell(i, a, r) for i, (a, r) in enumerate(pairs))
    levels = tuple(LevelPlan(c, m.load.requests_at(c), m.load.warmup_at(c)) for c in m.load.levels)
    return Plan(cells=cells, levels=levels, order=order, start=start)


@dataclass(frozen=True)
class Estimate:
    requests: int
    warmup_requests: int
    output_tokens: int
    seconds: float
    assumed_itl_ms: float
    assumed_start_s: float


def estimate(m: Manifest, plan: Plan, *, itl_ms: float = 20.0, start_s: float | None = None) -> Estimate:
    """A rough duration: each level runs in waves of `concurrency` requests of output_tokens x ITL."""
    per_cell = 0.0
    req = warm = 0
    for lv in plan.levels:
        waves = math.ceil(lv.requests / lv.concurrency) + math.ceil(lv.warmup / lv.concurrency)
        per_cell += waves * (m.load.output_tokens * itl_ms / 1000.0 + 0.05)
        req += lv.requests
        warm += lv.warmup
    start = start_s if start_s is not None else (5.0 if m.runtime == "process" else 120.0)
    n = len(plan.cells)
    return Estimate(
        requests=req * n,
        warmup_requests=warm * n,
        output_tokens=req * n * m.load.output_tokens,
        seconds=n * (per_cell + start),
        assumed_itl_ms=itl_ms,
        assumed_start_s=start,
    )
