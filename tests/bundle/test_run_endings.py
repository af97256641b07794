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
from kit.report.rebuild import rebuild
from kit.signing import ManifestTrust, SigningKey, user_trust_file


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


@pytest.mark.plots
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


@pytest.mark.slow  # plots: seconds of matplotlib
@pytest.mark.parametrize("value", ["0", "off"])
def test_kit_plots_0_writes_the_report_without_plots_and_kit_report_draws_them(
        make_bundle: Callable[..., Bundle], runner: SigningKey, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """KIT_PLOTS=0: the run's report.md says the plots were not drawn and how to draw them, no plots/ folder is
    left (not even an earlier finish's), the bundle is sealed; `kit report` (rebuild) then draws them, links
    them from report.md and re-signs. Unset (kit's default), the run draws them."""
    b = make_bundle()
    b.remove_provenance()
    monkeypatch.setenv("KIT_PLOTS", value)
    session = BundleSession(b, resumed=False, checkpoints=Checkpointer(b, runner, Chain()))
    summary, status = finalize(session, _closing(runner), "complete")
    assert summary and status == "complete"
    report = b.path("report.md").read_text()
    assert "Not drawn: KIT_PLOTS=0 where this run finished. `kit report BUNDLE` draws them" in report
    assert "![" not in report and not b.exists("plots")
    verify_integrity(b.root)
    trust = user_trust_file()  # kit report re-signs only what a runner the user trusts signed
    trust.parent.mkdir(parents=True, exist_ok=True)
    trust.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    lines = rebuild(b.root, runner.path)
    assert "wrote plots/throughput.png" in lines and "Not drawn" not in b.path("report.md").read_text()
    assert "![throughput](plots/throughput.png)" in b.path("report.md").read_text()
    verify_integrity(b.root)
    monkeypatch.delenv("KIT_PLOTS")
    b.remove_provenance()
    finalize(BundleSession(b, resumed=False, checkpoints=Checkpointer(b, runner, Chain())), _closing(runner), "complete")
    assert (b.path("plots") / "throughput.png").stat().st_size > 10_000
