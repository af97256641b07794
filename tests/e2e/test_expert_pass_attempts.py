"""An expert pass that cannot record (the server started without the recorder) is kept as a failed file naming
why, between its gates, and the run goes on; the next attempt (a resumed run) moves it aside, never deletes it,
and records. Real engine servers through the process runtime (kit.experiment.expert_pass.run_expert_passes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import ROOT
from support.manifests import ab_arms, manifest_data, manifest_model

from kit.bundle import Bundle
from kit.experiment.cells import CellRunner
from kit.experiment.expert_pass import run_expert_passes
from kit.experiment.options import QuietEvents
from kit.files.expert_pass import ExpertPassFile
from kit.plan import make_plan
from kit.runtime.process import ProcessRuntime

pytestmark = pytest.mark.slow
pytest.importorskip("torch")


def _runner(tmp_path: Path, port: int, server_args: list[str] | None) -> CellRunner:
    extra = {} if server_args is None else {"server_args": server_args}
    m = manifest_model(manifest_data(
        "attempts", port=port, arms=ab_arms(), server={"ready_timeout_s": 60, "stop_grace_s": 5,
                                                       "env": {"PYTHONPATH": str(ROOT)}},
        gates={"port_deadline_s": 5},
        expert_pass={"top_k": 4, "requests": 6, "concurrency": 3, "prompt_tokens": 8, "output_tokens": 6, **extra}))
    (tmp_path / "b").mkdir(exist_ok=True)
    return CellRunner(m, make_plan(m), Bundle(tmp_path / "b", "abc123"), ProcessRuntime(), QuietEvents())


def test_failed_pass_is_kept_and_the_next_attempt_moves_it_aside(tmp_path: Path, port: int,
                                                                  isolated: dict[str, str]) -> None:
    run_expert_passes(_runner(tmp_path, port, []))  # no recorder flag: the endpoints answer 500
    first = ExpertPassFile.model_validate_json((tmp_path / "b/experts/baseline/expert_distribution.json").read_text())
    assert first.status == "failed" and first.error is not None and "HTTP 500" in first.error
    gates = (tmp_path / "b/experts/baseline/gates.jsonl").read_text().splitlines()
    assert [json.loads(g)["phase"] for g in gates] == ["before", "after"]
    run_expert_passes(_runner(tmp_path, port, None))
    for arm in ("baseline", "oea"):
        again = ExpertPassFile.model_validate_json((tmp_path / f"b/experts/{arm}/expert_distribution.json").read_text())
        assert again.status == "ok" and again.decode_passes > 0, again.error
        kept = tmp_path / f"b/experts/{arm}-a1/expert_distribution.json"
        assert json.loads(kept.read_text())["status"] == "failed"
