"""The end of every run, however it ended: summary and report recomputed, run.json closed, the bundle
signed, so that it verifies and can be resumed."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kit import __version__
from kit.bundle import sign_provenance
from kit.errors import KitError, storage_error
from kit.experiment.session import BundleSession
from kit.files import JsonObject
from kit.files.run import FailedCell, RunFile
from kit.manifest import Manifest
from kit.plumbing.clock import utc_now
from kit.plumbing.treedigest import METHOD, tree_digest
from kit.report import render_report, verdict_lines
from kit.report.plots import wanted as plots_wanted
from kit.signing import ManifestTrust, SigningKey
from kit.stats import summarize_bundle

if TYPE_CHECKING:
    from kit.images import ImageInfo


@dataclass
class Closing:
    """What the finish needs to know of the run."""

    m: Manifest
    trust: ManifestTrust
    key: SigningKey
    images: Mapping[str, ImageInfo]
    failed: Mapping[str, FailedCell]
    notices: list[str] = field(default_factory=list)
    summary_error: str | None = None  # set by finalize: why there is no summary
    report_error: str | None = None  # set by finalize: why a summarised run has no report.md


def finalize(session: BundleSession, c: Closing, status: str) -> tuple[JsonObject, str]:
    """Summarise and report (a failure there is a notice, never a lost bundle), close run.json, sign the end
    checkpoint and the provenance. Returns the summary and the run's status: a run whose every cell ran but
    whose summary could not be computed ends "failed" (``Closing.summary_error`` says why); one whose report
    could not be rendered stays "complete", its summary and verdicts kept (``Closing.report_error``)."""
    bundle = session.bundle
    summary: JsonObject = {}
    for stale in ("summary.json", "report.md"):
        bundle.path(stale).unlink(missing_ok=True)
    shutil.rmtree(bundle.path("plots"), ignore_errors=True)
    def summarise() -> None:
        nonlocal summary
        summary = summarize_bundle(bundle.root)
        bundle.write_json("summary.json", summary)

    c.summary_error = attempt("summary", summarise, c.notices)
    if c.summary_error is None and summary:
        c.report_error = attempt("report", lambda: render_report(bundle.root, summary, draw=plots_wanted()), c.notices)
    else:
        summary, c.summary_error = {}, c.summary_error or "no summary"
        status = "failed" if status == "complete" else status
    run = bundle.read("run.json", RunFile)
    run.status, run.finished, run.failed_cells = status, utc_now(), dict(c.failed)
    if c.summary_error is not None or run.summary_error is not None:
        run.summary_error = c.summary_error  # cleared by a resume that computes it
    bundle.write_json("run.json", run)
    sign_provenance(bundle, c.key, predicate=predicate(run, c), checkpoints=session.checkpoints, status=status)
    return summary, status


def attempt(what: str, step: Callable[[], object], notices: list[str]) -> str | None:
    """Run one step of the finish; a failure is a notice (and the returned reason), never a lost bundle, except a
    full or failing disk, which ends the run (nothing more can be written; the checkpoints hold the cells)."""
    try:
        step()
    except OSError as e:
        if storage_error(e) is not None:
            raise
        why = f"{what} failed: {type(e).__name__}: {e}"
    except Exception as e:  # noqa: BLE001 - a broken summary or report must not lose the bundle
        why = f"{what} failed: {type(e).__name__}: {e}"
    else:
        return None
    notices.append(why)
    return why


def predicate(run: RunFile, c: Closing) -> JsonObject:
    """The caller's pieces of the SLSA provenance predicate."""
    return {
        "externalParameters": {"flags": run.flags.model_dump(mode="json") if "flags" in run.model_fields_set else {},
                               "argv": run.argv},
        "internalParameters": {"kit": __version__, "runtime": c.m.runtime,
                               "hardware": c.m.hardware.model_dump(), "trust": c.trust.as_dict()},
        "resolvedDependencies": [
            {"uri": f"docker-image:{a}", "digest": {"sha256": i.image_id.split(":")[-1]}, "annotations": i.as_dict()}
            for a, i in c.images.items()
        ] + model_dependency(c.m, run.status, c.notices),
        "metadata": {"startedOn": run.started, "finishedOn": run.finished},
    }


def model_dependency(m: Manifest, status: str, notices: list[str]) -> list[JsonObject]:
    """The model directory's sha256 tree when the manifest asks for it (``model.digest``).

    Hashed only when the run completes: reading every byte of a large model while interrupts are deferred
    could outlast a scheduler's grace period (Slurm kills 30 s after SIGTERM) before the bundle is signed. Any
    other ending records the digest as deferred (a resumed run that completes hashes then); a directory that
    cannot be hashed is recorded with the reason and added to ``notices``."""
    if not m.model.digest:
        return []
    if not m.model.path:
        notices.append("model.digest is set but model.path is not: no model digest recorded")
        return []
    path = Path(m.model.path).expanduser().absolute()
    dep: JsonObject = {"uri": f"file://{path}", "digest": {}}
    notes: JsonObject = {"model.path": m.model.path, "method": METHOD}
    if status != "complete":
        deferred = f"the run ended {status}; the model is hashed when the run completes (kit run --resume)"
        return [{**dep, "annotations": {**notes, "deferred": deferred}}]
    try:
        tree = tree_digest(path)
    except (OSError, KitError) as e:
        why = e.message if isinstance(e, KitError) else str(e)
        notices.append(f"model.digest: {path} was not hashed ({why}); the provenance records no model digest")
        return [{**dep, "annotations": {**notes, "error": why}}]
    return [{**dep, "digest": {"sha256": tree.digest},
             "annotations": {**notes, "files": len(tree.files), "bytes": tree.bytes}}]


def verdicts(summary: JsonObject) -> list[str]:
    """The report's verdict lines, or none when there is no summary (or it cannot be judged)."""
    if not summary:
        return []
    try:
        return verdict_lines(summary)
    except Exception:  # noqa: BLE001 - verdicts are a courtesy on the terminal
        return []
