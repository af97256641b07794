"""server.info_path and quality through `kit run`: each cell keeps the engine's account of itself (here kit's
engine's /v1/models, the JSON it serves; an sglang manifest reads /server_info) and its untimed quality check
(kit's engine writes word salad: the check is wired, not passed), valid against bundle.schema.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from e2e_helpers import ROOT, bundle_of, kit, read_json
from support.manifests import ab_arms, manifest_data, write_manifest

from kit.files.schema import validate_bundle_files

pytestmark = pytest.mark.slow


def test_each_cell_keeps_the_engine_account_and_its_quality_check(tmp_path: Path, port: int,
                                                                 isolated: dict[str, str]) -> None:
    data = tmp_path / "gsm.jsonl"
    data.write_text("".join(json.dumps({"question": f"What is {i} plus 1?", "answer": f"#### {i + 1}"}) + "\n"
                            for i in range(6)))
    m = write_manifest(tmp_path / "info.yaml", manifest_data(
        "info", port=port, arms=ab_arms(),
        server={"ready_timeout_s": 60, "stop_grace_s": 5, "info_path": "/v1/models"},
        load={"levels": [1], "requests_per_level": 4, "warmup_requests": 1, "prompt_tokens": 8, "output_tokens": 4,
              "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1}, gates={"port_deadline_s": 5},
        quality={"dataset": str(data), "shots": 2, "questions": 4, "concurrency": 2, "max_tokens": 16}))
    out = tmp_path / "results"
    r = kit("run", str(m), "--out", str(out), "--allow-unsigned", env=isolated)
    assert r.returncode == 0, r.stdout + r.stderr
    b = bundle_of(out)
    for cell in read_json(b / "plan.json")["cells"]:
        info = read_json(b / "cells" / cell["id"] / "server_info.json")
        assert info["path"] == "/v1/models" and info["status"] == 200 and info.get("error") is None
        assert isinstance(info["info"]["data"], list) and info["info"]["data"]
        assert info.get("patch") is None and info.get("version") is None  # kit's engine is no patched sglang
        quality = read_json(b / "cells" / cell["id"] / "quality.json")
        assert quality["asked"] == 4 and [i["index"] for i in quality["items"]] == [2, 3, 4, 5]
        assert quality["errors"] == 0, quality  # every question answered
    # report.md: per arm, the pooled count of its cells' files
    report = (b / "report.md").read_text()
    assert "## Output quality (untimed, descriptive: not tested, not in any verdict)" in report
    for arm in ("baseline", "oea"):
        files = [read_json(b / "cells" / c["id"] / "quality.json") for c in read_json(b / "plan.json")["cells"]
                 if c["arm"] == arm]
        correct, asked = sum(f["correct"] for f in files), sum(f["asked"] for f in files)
        assert f"| {arm} | {len(files)} | {correct} / {asked} | {correct / asked:.3f} [" in report
    schema = json.loads((ROOT / "bundle.schema.json").read_text())
    assert any(p.endswith("server_info.json") for p in validate_bundle_files(b, schema))
