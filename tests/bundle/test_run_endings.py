"""How a run ends when its last step fails: no summary is never a success; the end is checkpointed and sealed."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable

import pytest
import yaml
from support.bundles import SIGNED_MANIFEST

from kit.bundle import Bundle, Checkpointer, read_chain, verify_integrity
from kit.bundle.checkpoints import Chain
from kit.errors import ExitCode, SummaryFailed
from kit.experiment.finish import Closing, finalize
from kit.experiment.options import QuietEvents
from kit.experiment.run import outcome
from kit.experiment.session import BundleSession
from kit.files.run import RunFile
from kit.manifest import Manifest
from kit.signing import ManifestTrust, SigningKey


def _closing(runner: SigningKey) -> Closing:
    trust = ManifestTrust(signed=False, signers=(), allow_unsigned=True, note="test")
    return Closing(Manifest.model_validate(yaml.safe_load(SIGNED_MANIFEST)), trust, runner, {}, {})


def test_a_run_whose_summary_cannot_be_computed_fails_clearly_and_is_still_sealed(
        make_bundle: Callable[..., Bundle], runner: SigningKey) -> None:
    b = make_bundle()
    b.remove_provenance()
    b.path("plan.json").unlink()  # the summary is computed from the plan and the records: it raises now
    session = BundleSession(b, resumed=False, checkpoints=Checkpointer(b, runner, Chain()))
    c = _closing(runner)
    summary, status = finalize(session, c, "complete")
    assert summary == {} and status == "failed"
    run = b.read("run.json", RunFile)
    assert run.status == "failed" and "plan.json" in (run.summary_error or "")
    assert not b.exists("summary.json") and not b.exists("report.md")
    verify_integrity(b.root)  # sealed all the same: nothing measured is lost
    assert read_chain(b.root, None).links[-1].statement.predicate.status == "failed"
    with pytest.raises(SummaryFailed) as e:
        outcome(session, c, status, None, summary, QuietEvents())
    assert e.value.exit_code == ExitCode.INTERNAL != ExitCode.OK
    assert "every cell ran, but the summary could not be computed" in e.value.message
    assert "plan.json" in e.value.message and f"kit run --resume {b.root}" in (e.value.hint or "")


def test_a_computed_summary_clears_an_earlier_summary_error(make_bundle: Callable[..., Bundle],
                                                           runner: SigningKey) -> None:
    b = make_bundle()
    run = b.read("run.json", RunFile)
    run.summary_error = "OverflowError: int too large"
    b.write_json("run.json", run)
    summary, status = finalize(BundleSession(b, resumed=False), _closing(runner), "complete")
    assert summary and status == "complete"
    assert json.loads(b.path("run.json").read_bytes())["summary_error"] is None


def test_a_run_whose_report_cannot_be_rendered_keeps_its_verdicts_and_does_not_exit_0(
        make_bundle: Callable[..., Bundle], runner: SigningKey) -> None:
    b = make_bundle()
    b.remove_provenance()
    shutil.rmtree(b.path("plots"), ignore_errors=True)
    b.path("plots").write_text("a file where the plots' folder goes\n")  # the report's figures cannot be written
    session = BundleSession(b, resumed=False, checkpoints=Checkpointer(b, runner, Chain()))
    c = _closing(runner)
    summary, status = finalize(session, c, "complete")
    assert summary and status == "complete" and b.exists("summary.json") and not b.exists("report.md")
    assert c.summary_error is None and c.report_error is not None and "plots" in c.report_error
    verify_integrity(b.root)
    with pytest.raises(SummaryFailed) as e:
        outcome(session, c, status, None, summary, QuietEvents())
    assert e.value.exit_code == ExitCode.INTERNAL != ExitCode.OK
    assert "report.md could not be rendered" in e.value.message
    assert f"kit report {b.root}" in (e.value.hint or "")
