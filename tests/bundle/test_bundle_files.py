"""The typed bundle files: one read policy, schema_version in what kit writes, and bundle.schema.json
generated from the models (checked in, like manifest.schema.json)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import ClassVar

import jsonschema
import pytest
from click.testing import CliRunner

from kit.bundle import Bundle
from kit.cli import main
from kit.errors import BundleError, ExitCode
from kit.experiment.cells import record_overhead
from kit.files.base import BundleFile
from kit.files.cell import CellFile, LevelOutcome, ServerStopped
from kit.files.plan import PlanFile
from kit.files.run import RunFile
from kit.files.schema import REGISTRY, bundle_schema, bundle_schema_text, validate_bundle_files

ROOT = Path(__file__).resolve().parents[2]


def test_checked_in_bundle_schema_equals_generated() -> None:
    assert (ROOT / "bundle.schema.json").read_text() == bundle_schema_text(), \
        "run `kit schema --bundle -o bundle.schema.json`"


def test_cli_writes_the_bundle_schema(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    assert CliRunner().invoke(main, ["schema", "--bundle", "-o", str(out)]).exit_code == 0
    assert out.read_text() == bundle_schema_text()


def test_every_registered_file_has_a_definition() -> None:
    s = bundle_schema()
    files = s["x-kit-files"]
    assert isinstance(files, dict) and set(files) == set(REGISTRY)
    defs = s["$defs"]
    assert isinstance(defs, dict)
    for ref in files.values():
        assert ref.removeprefix("#/$defs/") in defs


def test_the_registry_takes_more_files() -> None:
    class GateLine(BundleFile):
        file_pattern: ClassVar[str] = "cells/*/gates.jsonl"
        phase: str

    s = bundle_schema({**REGISTRY, GateLine.file_pattern: GateLine})
    assert s["x-kit-files"]["cells/*/gates.jsonl"] == "#/$defs/GateLine"  # type: ignore[index]


@pytest.mark.slow  # seconds of subprocesses or plots: the slow tier (unit tier budget, issue 21)
def test_written_files_carry_schema_version_and_validate(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    b.write_json("run.json", RunFile(run_id=b.run_id, experiment="demo", started="2026-01-01T00:00:00.000000Z"))
    b.write_json("plan.json", PlanFile.model_validate(
        {"order": "blocked", "cells": [{"index": 0, "arm": "a", "repeat": 1, "id": "a-r1"}],
         "levels": [{"concurrency": 1, "requests": 4, "warmup": 1}]}))
    cell = CellFile(id="a-r1", arm="a", repeat=1, index=0, status="ok")
    cell.levels = {"1": LevelOutcome(ok=4, errors=0, wall_s=1.0, client_bound=False)}
    b.write_json("cells/a-r1/cell.json", cell)
    b.write_json("images.json", {})
    for rel in ("run.json", "plan.json", "cells/a-r1/cell.json"):
        assert json.loads(b.path(rel).read_text())["schema_version"] == 1
    assert json.loads(b.path("run.json").read_text()).keys() == {
        "run_id", "experiment", "started", "schema_version"}  # only what was given (the layout stays)
    assert validate_bundle_files(b.root) == ["cells/a-r1/cell.json", "images.json", "plan.json", "run.json"]
    b.write_json("plan.json", {"order": "blocked", "cells": "none", "levels": []})
    with pytest.raises(jsonschema.ValidationError, match=r"plan\.json"):
        validate_bundle_files(b.root)
    assert b.read("cells/a-r1/cell.json", CellFile).levels["1"].ok == 4


def test_one_read_policy_names_the_file_and_the_field(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    with pytest.raises(BundleError, match=r"no plan\.json") as e:
        b.read("plan.json", PlanFile)
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    b.write_bytes("plan.json", b"{oops")
    with pytest.raises(BundleError, match=r"plan\.json: unreadable"):
        b.read("plan.json", PlanFile)
    b.write_json("plan.json", {"order": "blocked", "cells": [{"index": "x"}], "levels": []})
    with pytest.raises(BundleError, match=r"plan\.json: field cells\.0\.index"):
        b.read("plan.json", PlanFile)


def test_old_files_without_a_version_still_read(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    b.write_json("run.json", {"run_id": b.run_id, "status": "complete", "evidence": {"free": "form"}})
    run = b.read("run.json", RunFile)
    assert run.schema_version == 1 and run.status == "complete"
    assert run.to_json()["evidence"] == {"free": "form"}  # extra fields are kept


def test_kit_overhead_is_the_cell_wall_less_ready_levels_and_stop() -> None:
    cell = CellFile(id="a-r1", arm="a", repeat=1, index=0, ready_s=2.0)
    cell.levels = {"1": LevelOutcome(ok=1, errors=0, wall_s=3.0, client_bound=False),
                   "2": LevelOutcome(ok=1, errors=0, wall_s=4.0, client_bound=False)}
    record_overhead(cell, 10.0)
    assert cell.kit_overhead_s is None  # never stopped: no overhead to state
    cell.stop = ServerStopped(exit_code=0, signal="SIGTERM", stop_s=0.5)
    record_overhead(cell, 10.0)
    assert cell.kit_overhead_s == 0.5
    assert cell.overhead_parts is not None and cell.overhead_parts.levels_wall_s == 7.0
    cell.levels["2"].warmup_s = 0.25  # the manifest's warm-up requests are load, not kit's own time
    record_overhead(cell, 10.0)
    assert cell.kit_overhead_s == 0.25 and cell.overhead_parts is not None and cell.overhead_parts.warmup_s == 0.25
