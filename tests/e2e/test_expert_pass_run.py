"""manifest ``expert_pass`` through `kit run`: after the timed cells, one untimed server per arm with the
recorder on (the timed cells' servers never get the flag), its gates, its dump read into
experts/<arm>/expert_distribution.json (valid against bundle.schema.json, covered by the signed provenance:
`kit verify` passes), and the report's descriptive section; baseline vs OEA in the direction OEA predicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import ROOT, bundle_of, kit, read_json
from support.manifests import ab_arms, manifest_data, write_manifest

from kit.files.schema import validate_bundle_files

pytestmark = pytest.mark.slow
pytest.importorskip("torch")  # the engine writes its dump with torch.save, as sglang does


def test_kit_run_records_distinct_experts_per_arm(tmp_path: Path, port: int, isolated: dict[str, str]) -> None:
    m = write_manifest(tmp_path / "experts.yaml", manifest_data(
        "experts", port=port, arms=ab_arms(),
        server={"ready_timeout_s": 60, "stop_grace_s": 5, "env": {"PYTHONPATH": str(ROOT)}},  # this tree's engine
        load={"levels": [1], "requests_per_level": 4, "warmup_requests": 1, "prompt_tokens": 8, "output_tokens": 4,
              "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1}, gates={"port_deadline_s": 5},
        expert_pass={"top_k": 4, "requests": 16, "concurrency": 8, "prompt_tokens": 24, "output_tokens": 12}))
    out = tmp_path / "results"
    r = kit("run", str(m), "--out", str(out), "--allow-unsigned", env=isolated)
    assert r.returncode == 0, r.stdout + r.stderr
    b = bundle_of(out)
    files = {arm: read_json(b / "experts" / arm / "expert_distribution.json") for arm in ("baseline", "oea")}
    for arm, f in files.items():
        assert f["status"] == "ok" and f["answered"] == 16, f
        assert f["server_args"] == ["--expert-distribution-recorder-mode", "per_pass"]
        assert f["decode_passes"] > 0 and f["prefill_passes"] > 0 and len(f["layers"]) == 2
        gates = [json.loads(line) for line in (b / "experts" / arm / "gates.jsonl").read_text().splitlines()]
        assert [g["phase"] for g in gates] == ["before", "after"] and all(g["ok"] for g in gates)
    for cell in read_json(b / "plan.json")["cells"]:  # the timed cells' servers never had the recorder
        assert "--expert-distribution-recorder-mode" not in read_json(b / "cells" / cell["id"] / "server.json")[
            "command"]
    print({a: (f["mean_distinct"], [(x["batch"], x["mean"]) for x in f["by_batch"]]) for a, f in files.items()})
    assert files["oea"]["mean_distinct"] < files["baseline"]["mean_distinct"]
    assert all(x["mean"] == 2.0 for x in files["oea"]["by_batch"] if x["batch"] == 1)  # top-k0 alone at batch 1
    report = (b / "report.md").read_text()
    assert "## Distinct experts per MoE layer per decode step (untimed, descriptive" in report
    for arm, f in files.items():
        assert f"| {arm} | {f['decode_passes']} | {f['mean_distinct']:.2f} of 16 |" in report
    schema = json.loads((ROOT / "bundle.schema.json").read_text())
    assert any(p.endswith("expert_distribution.json") for p in validate_bundle_files(b, schema))
    v = kit("verify", str(b), env=isolated)
    assert v.returncode == 0, v.stdout + v.stderr
