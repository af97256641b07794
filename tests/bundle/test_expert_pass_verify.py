"""kit verify's check of expert-pass files: each experts/*/expert_distribution.json reads as ExpertPassFile (the
model bundle.schema.json is generated from), and the same document validates against the checked-in schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from kit.files.expert_pass import ExpertPassFile, expert_pass_problems
from kit.files.schema import validate_bundle_files

ROOT = Path(__file__).resolve().parents[2]


def test_expert_pass_files_are_read_as_their_model(tmp_path: Path) -> None:
    good = ExpertPassFile(arm="baseline", status="ok", requests=4, concurrency=2, prompt_tokens=8, output_tokens=4,
                          top_k=4, seed=0, server_args=["--expert-distribution-recorder-mode", "per_pass"])
    (tmp_path / "experts" / "baseline").mkdir(parents=True)
    (tmp_path / "experts" / "baseline" / "expert_distribution.json").write_text(json.dumps(good.to_json()))
    assert expert_pass_problems(tmp_path) == []
    schema = json.loads((ROOT / "bundle.schema.json").read_text())
    assert validate_bundle_files(tmp_path, schema) == ["experts/baseline/expert_distribution.json"]
    bad = {**good.to_json(), "layers": [{"layer": "zero"}]}
    (tmp_path / "experts" / "oea").mkdir()
    (tmp_path / "experts" / "oea" / "expert_distribution.json").write_text(json.dumps(bad))
    (problem,) = expert_pass_problems(tmp_path)
    assert "experts/oea/expert_distribution.json" in problem
    try:
        validate_bundle_files(tmp_path, schema)
    except jsonschema.ValidationError as e:
        assert e.message.startswith("experts/oea/expert_distribution.json")
    else:
        raise AssertionError("the checked-in schema took a layer without numbers")
