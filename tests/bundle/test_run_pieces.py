"""Pieces of the orchestrator that need no server: which cells a resume runs, and the one error a run
with failed cells ends in."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kit.bundle import Bundle
from kit.errors import CellsFailed, ExitCode, LoadError
from kit.experiment.finish import Closing
from kit.experiment.options import QuietEvents
from kit.experiment.run import cells_to_run, outcome
from kit.experiment.session import BundleSession
from kit.files.cell import CellFile
from kit.files.run import FailedCell
from kit.manifest import Manifest
from kit.plan import Cell
from kit.signing import ManifestTrust, SigningKey

ROOT = Path(__file__).resolve().parents[2]


def _closing(failed: dict[str, FailedCell], runner: SigningKey) -> Closing:
    trust = ManifestTrust(signed=False, signers=(), allow_unsigned=True, note="test")
    return Closing(Manifest.model_construct(), trust, runner, {}, failed)


def test_resume_runs_the_cells_not_ok_and_moves_earlier_attempts_aside(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    cells = (Cell(0, "a", 1), Cell(1, "b", 1), Cell(2, "a", 2))
    b.write_json("cells/a-r1/cell.json", CellFile(id="a-r1", arm="a", repeat=1, index=0, status="ok"))
    b.write_json("cells/b-r1/cell.json", CellFile(id="b-r1", arm="b", repeat=1, index=1, status="failed"))
    assert cells_to_run(b, cells) == [cells[1], cells[2]]
    assert b.exists("failed/b-r1-a1/cell.json") and not b.exists("cells/b-r1")


def test_failed_cells_end_as_one_error_with_the_first_cells_exit_code(tmp_path: Path, runner: SigningKey) -> None:
    session = BundleSession(Bundle.create(tmp_path, "demo"), resumed=False)
    failed = {"a-r1": FailedCell(exit_code=8, reason="level 1 of a-r1: all 4 requests failed\nmore"),
              "b-r1": FailedCell(exit_code=7, reason="server exited")}
    with pytest.raises(CellsFailed) as e:
        outcome(session, _closing(failed, runner), "failed", None, {}, QuietEvents())
    assert e.value.exit_code == ExitCode.LOAD_FAILED
    assert e.value.message == "2 cell(s) failed (a-r1: level 1 of a-r1: all 4 requests failed; b-r1: server exited)"
    assert f"kit run --resume {session.bundle.root}" in str(e.value)


def test_an_error_that_ended_the_run_gets_a_note_not_a_new_message(tmp_path: Path, runner: SigningKey) -> None:
    session = BundleSession(Bundle.create(tmp_path, "demo"), resumed=False)
    err = LoadError("the load driver died", hint="see its log")
    with pytest.raises(LoadError) as e:
        outcome(session, _closing({}, runner), "failed", err, {}, QuietEvents())
    assert e.value is err and err.message == "the load driver died"
    assert str(err) == (f"the load driver died\nThe bundle is consistent and resumable: kit run --resume "
                        f"{session.bundle.root}\nHint: see its log")


def test_kit_verify_and_the_bundle_verifier_import_each_other_one_way() -> None:
    tree = ast.parse((ROOT / "kit/bundle/verify.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert "kit.verify" not in imported
