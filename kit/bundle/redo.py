"""Re-measuring what was flagged: ``kit run --resume DIR --redo client-bound|failed`` (docs/statistics.md, "Re-measured
cells"), and the rule ``kit verify`` recomputes.

The rule: an attempt of a cell may be replaced by a re-run only when it *failed* (its cell.json status is not ok) or
was *client-bound* (one of its levels' client.json says the load generator, not the server, limited it: the guardrail
that withholds a level's verdict, read by ``kit.stats.figures.client_figures``, the statistics' own reading). The
replaced attempt moves, whole, to ``redone/<cell>-a<n>/`` (a failed one: where every resume puts it,
``failed/<cell>-a<n>/``) and stays in the bundle, signed; the resume records it in
run.json (``resumed[].redone``: cell, reason, where it went, the evidence). The statistics read only ``cells/<cell>/``,
the cell's last attempt, so a replaced attempt never counts; the re-runs run in the plan's order (the resume runs the
missing cells as the plan orders them). ``kit verify`` fails a bundle where a directory under redone/ is not recorded,
a record names no such directory, or the files of a replaced attempt do not show the reason recorded for it (a cell
re-run because its result was unwelcome).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from kit.bundle.layout import Bundle
from kit.errors import BundleError, UsageError
from kit.files.read import read_file
from kit.files.run import Redone, RunFile
from kit.stats.bundle import read_json, recorded_looks
from kit.stats.figures import client_figures

REASONS = ("client-bound", "failed")
REDONE = "redone"


def why_redo(cell_dir: Path, reasons: Iterable[str] = REASONS) -> tuple[str, str] | None:
    """(reason, evidence) when the attempt in ``cell_dir`` may be replaced for one of ``reasons``; else None. Its
    files are read as the statistics read them (``kit.stats.bundle.read_json``, ``client_figures``)."""
    wanted = set(reasons)
    cell = read_json(cell_dir / "cell.json")
    status = str(cell.get("status", "unknown")) if isinstance(cell, dict) else "missing"
    if status != "ok":
        return ("failed", f"status {status}") if "failed" in wanted else None
    if "client-bound" not in wanted:
        return None
    for level in sorted(p for p in cell_dir.glob("level-*") if p.is_dir() and not p.is_symlink()):
        client = read_json(level / "client.json")
        if not isinstance(client, dict):
            continue
        try:
            figures = client_figures(client)
        except (TypeError, ValueError) as e:
            raise BundleError(f"{level / 'client.json'}: unreadable ({e})") from None
        if figures["client_bound"]:
            return "client-bound", f"{level.name}: " + ("; ".join(figures["client_bound_reasons"]) or "client_bound")
    return None


def looked_at(root: Path) -> set[str]:
    """The cells a sequential run's recorded looks were taken on (``looks/<k>.json``'s cells; none: a fixed design)."""
    return {str(c) for doc in recorded_looks(root) for c in doc.get("cells", [])}


def set_aside_for_redo(bundle: Bundle, cell_ids: Sequence[str], reasons: Sequence[str]) -> list[Redone]:
    """Move every cell (in plan order) whose attempt qualifies to redone/; the resume then runs them again. A cell
    a recorded look was taken on is never replaced (UsageError before anything moves): the look, its decision and
    ``kit verify``'s recomputation of it rest on that attempt."""
    todo = [(cid, why) for cid in cell_ids if (bundle.path(f"cells/{cid}") / "cell.json").is_file()
            and (why := why_redo(bundle.path(f"cells/{cid}"), reasons)) is not None]
    if used := sorted({cid for cid, _ in todo} & looked_at(bundle.root)):
        raise UsageError(f"--redo: the sequential looks of {bundle.root} were taken on {', '.join(used)}: re-measuring "
                         "them would change what those looks saw and decided",
                         hint="judge this bundle as it stands, or run the experiment again (a sequential run "
                         "measures a flagged cell again before the look of its block: design.redo_client_bound)")
    out = []
    for cid, why in todo:
        moved = bundle.move_failed_attempt(cid, to=REDONE)
        out.append(Redone(cell=cid, reason=why[0], attempt=moved.relative_to(bundle.root).as_posix(), why=why[1]))
    return out


def failed_redone(root: Path, attempts: dict[str, str]) -> list[Redone]:
    """The failed attempts a resume's reconcile set aside (``failed/<id>-a<n>``, every file as signed), recorded as
    re-run for ``--redo failed``: a resume re-runs a failed cell in any case; the redo says so, for the record."""
    out = []
    for cid, attempt in attempts.items():
        if (why := why_redo(root / attempt, ["failed"])) is not None:
            out.append(Redone(cell=cid, reason="failed", attempt=attempt, why=why[1]))
    return out


def to_redo(root: Path, cell_ids: Sequence[str], reasons: Sequence[str]) -> list[str]:
    """The cells a ``--redo`` would re-run (read only: the decision is made again under the lock)."""
    return [c for c in cell_ids
            if (root / "cells" / c / "cell.json").is_file() and why_redo(root / "cells" / c, reasons) is not None]


def client_bound_hint(root: Path, again: str) -> str | None:
    """After a run whose cells include client-bound ones (their level has no verdict) that no sequential look was
    taken on: which, and ``again`` (the command that resumes the run) with ``--redo client-bound``, which re-measures
    only them. None otherwise."""
    cells = to_redo(root, sorted(p.name for p in (root / "cells").iterdir() if p.is_dir()), ["client-bound"])
    if not cells or set(cells) & looked_at(root):
        return None
    return (f"no verdict where a cell was client-bound ({', '.join(cells)}): the load client, not the server, may "
            f"have set its numbers. Re-measure only those cells (each flagged attempt stays in the bundle, under "
            f"{REDONE}/; design.redo_client_bound: 1 re-measures such a cell at once, beside its block, in a later "
            f"run): {again} --redo client-bound")


def redo_problems(root: Path) -> list[str]:
    """What breaks the rule in a bundle (``kit verify``): empty when every replaced attempt is recorded and shows
    its recorded reason."""
    run = read_file(root, "run.json", RunFile)
    recorded = {r.attempt: r for r in [*run.redone, *(r for res in run.resumed for r in res.redone)]}
    folder = root / REDONE
    under_redone = {f"{REDONE}/{p.name}" for p in folder.iterdir()} if folder.is_dir() else set()
    problems = [f"{a}: a replaced attempt that run.json does not record (a re-run may replace only a failed or "
                "client-bound cell, recorded by the resume that did it)" for a in sorted(under_redone - set(recorded))]
    for a, r in sorted(recorded.items()):
        if not (root / a).is_dir() or (root / a).is_symlink():
            problems.append(f"{a}: recorded as replaced ({r.reason}) but not in the bundle")
        elif why_redo(root / a, [r.reason]) is None:
            problems.append(f"{a}: recorded as replaced for being {r.reason} ({r.why}), but its files show no such "
                            "thing: a re-run may replace only a failed or client-bound cell")
    return problems
