"""Measuring a cell again during the run (``design.redo_client_bound``): a cell whose load client was flagged
client-bound (``kit.bundle.redo.why_redo``, the statistics' own reading) is measured again right after it, before
the next cell or look, up to the manifest's limit. Each flagged attempt is signed first (a ``cell`` checkpoint),
then moved whole to ``redone/<cell>-a<n>``, recorded in run.json's ``redone`` and vouched for by a ``redo``
checkpoint, so a kill at any moment leaves a bundle whose resume keeps it; ``kit verify`` checks the rule as for
``kit run --resume --redo client-bound`` (docs/statistics.md, "Re-measured cells")."""

from __future__ import annotations

from kit.bundle.redo import REDONE, why_redo
from kit.experiment.cells import CellRunner
from kit.experiment.options import Events
from kit.experiment.session import BundleSession
from kit.files.cell import CellFile
from kit.files.run import Redone, RunFile
from kit.plan import Cell


def measure(cells: CellRunner, session: BundleSession, cell: Cell, limit: int, events: Events) -> str:
    """Run ``cell``, and again while it comes out client-bound, at most ``limit`` more times; its last status."""
    bundle = session.bundle
    for again in range(limit + 1):
        cells.run(cell)
        status = bundle.read(f"cells/{cell.id}/cell.json", CellFile).status
        why = why_redo(bundle.path(f"cells/{cell.id}"), ["client-bound"]) if status == "ok" and again < limit else None
        if why is None:
            return status
        session.checkpoint("cell", cell=cell.id, status=status)  # the flagged attempt is kept, signed
        moved = bundle.move_failed_attempt(cell.id, to=REDONE)
        run = bundle.read("run.json", RunFile)
        record = Redone(cell=cell.id, reason="client-bound", attempt=moved.relative_to(bundle.root).as_posix(),
                        why=why[1])
        run.redone = [*run.redone, record]  # assigned, not appended: a file writes only the fields set
        bundle.write_json("run.json", run)
        session.checkpoint("redo", cell=cell.id)
        events.message(f"cell {cell.id}: client-bound ({why[1]}); measuring it again ({again + 1} of {limit}, "
                       f"design.redo_client_bound), the attempt kept in {REDONE}/")
    raise AssertionError("unreachable: the last attempt returns")
