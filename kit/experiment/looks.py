"""The experiment loop's side of a sequential design (``design.sequential``): after each block of cells
(every arm twice, A B B A), one interim look written to ``looks/<k>.json`` before the cell's checkpoint covers
it; the run stops once a look says so. A resumed run keeps every look recorded and takes the next one when its
block is complete. The statistics: ``kit.stats.looks``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from kit.bundle import Bundle
from kit.errors import BundleError
from kit.files.looks import LookFile
from kit.manifest import Manifest
from kit.plan import Cell, Plan
from kit.stats.bundle import read_json, recorded_looks, stopped_block, take_look_at
from kit.stats.looks import LookDoc, LookInput, blocks, look_rel


@dataclass(frozen=True)
class _Cell:
    status: str
    started: str | None
    finished: str | None


def _seconds(c: _Cell) -> float:
    """The cell's wall time from its cell.json (0 when it has no start or end)."""
    if not c.started or not c.finished:
        return 0.0
    try:
        return max((datetime.fromisoformat(c.finished) - datetime.fromisoformat(c.started)).total_seconds(), 0.0)
    except ValueError:
        return 0.0


def look_text(doc: LookDoc) -> str:
    """'look 2 of 4 (16 cells): c=1 efficacy, c=4 continue; stop: decided'."""
    parts = [f"{c['arm']} c={c['level']} {c['decision']} (p={c['p_test']:.3g}, boundary {c['nominal_p']:.3g})"
             for c in doc["comparisons"]]
    stop = f"; stop: {doc['stop']}" if doc.get("stop") else ""
    return f"look {doc['look']} of {doc['of']} ({len(doc['cells'])} cells): {', '.join(parts)}{stop}"


class Looks:
    """The looks of one sequential run, as recorded in its bundle."""

    def __init__(self, m: Manifest, plan: Plan, bundle: Bundle) -> None:
        self.m, self.plan, self.bundle = m, plan, bundle
        self.done: list[LookDoc] = recorded_looks(bundle.root)

    @property
    def stopped(self) -> bool:
        return bool(self.done) and self.done[-1].get("stop") is not None

    def take_due(self) -> list[LookDoc]:
        """Every look whose block is now complete (each of its cells ok or ended failed) and not yet taken."""
        new: list[LookDoc] = []
        while not self.stopped and len(self.done) < blocks(self.m):
            k = len(self.done) + 1
            got = block_done(self.plan, self.bundle, k)
            if got is None:
                break
            ok, elapsed = got
            doc = take_look_at(self.bundle.root, self.m, LookInput(k, ok, round(elapsed, 3)), self.done)
            self.bundle.write_json(look_rel(k), LookFile.model_validate(doc))
            self.done.append(doc)
            new.append(doc)
        return new

    def due_lines(self) -> list[str]:
        return [look_text(doc) for doc in self.take_due()]


class SequentialLooks:
    """design.sequential's looks as the loop's ``Stopper`` (kit.experiment.stoprule)."""

    def __init__(self, looks: Looks) -> None:
        self.looks = looks

    @property
    def stopped(self) -> bool:
        return self.looks.stopped

    def take_due(self) -> list[str]:
        return self.looks.due_lines()


def block_done(plan: Plan, bundle: Bundle, k: int) -> tuple[tuple[str, ...], float] | None:
    """Once every cell of blocks 1..k (repeats 1..2k) has ended, ok or failed: the ok ones and the seconds all of
    them took; None while one has not."""
    block = [c for c in plan.cells if c.repeat <= 2 * k]
    states = [_state(bundle, c) for c in block]
    if any(s is None or s.status not in ("ok", "failed") for s in states):
        return None
    ok = tuple(c.id for c, s in zip(block, states, strict=True) if s is not None and s.status == "ok")
    return ok, sum(_seconds(s) for s in states if s is not None)


def _state(bundle: Bundle, cell: Cell) -> _Cell | None:
    """How the cell ended, as its cell.json says (only the three fields a look needs are read)."""
    doc = read_json(bundle.path(f"cells/{cell.id}/cell.json"))
    if not isinstance(doc, dict):
        return None
    started, finished = doc.get("started"), doc.get("finished")
    return _Cell(str(doc.get("status")), started if isinstance(started, str) else None,
                 finished if isinstance(finished, str) else None)


def needed_cells(m: Manifest, plan: Plan, bundle: Bundle) -> tuple[Cell, ...]:
    """The cells a run must have: all planned ones, or, once its looks stopped it (design.sequential, or kit
    reproduce --until-decided), those of its blocks."""
    try:
        k = stopped_block(bundle.root, m)
    except BundleError:
        return plan.cells
    if k is None:
        return plan.cells
    return tuple(c for c in plan.cells if c.repeat <= 2 * k)
