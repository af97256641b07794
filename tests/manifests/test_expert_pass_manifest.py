"""The manifest's ``expert_pass``: sglang's recorder flags by default, and a pass whose prefills could pass for
decode steps refused with the fix named (kit validate's exit 3, not a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError
from support.manifests import manifest_data, manifest_model, write_manifest

from kit.cli import main
from kit.manifest.expert_pass import SGLANG_DUMP_ENV


def test_defaults_are_sglangs_recorder() -> None:
    p = manifest_model(manifest_data(expert_pass={"top_k": 4})).expert_pass
    assert p is not None and p.server_args == ["--expert-distribution-recorder-mode", "per_pass"]
    assert p.dump_env == SGLANG_DUMP_ENV and p.prompt_tokens > p.concurrency
    assert manifest_model(manifest_data()).expert_pass is None


def test_prefills_as_small_as_a_decode_step_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"prompt_tokens \(16\) must exceed expert_pass.concurrency \(16\)"):
        manifest_model(manifest_data(expert_pass={"top_k": 4, "prompt_tokens": 16, "concurrency": 16}))
    path = write_manifest(tmp_path / "m.yaml", manifest_data(
        expert_pass={"top_k": 4, "prompt_tokens": 8, "concurrency": 16}))
    r = CliRunner().invoke(main, ["validate", str(path)])
    assert r.exit_code == 3, r.output
    assert "expert_pass.prompt_tokens (8) must exceed expert_pass.concurrency (16)" in r.output


def test_plan_names_the_passes_servers_and_counts_them(tmp_path: Path) -> None:
    """kit plan: the pass's one untimed server per arm after the timed cells is named, and counted in the server
    starts and the time (its requests in waves of its concurrency, each output_tokens x the assumed ITL)."""
    xp = {"top_k": 4, "requests": 10, "concurrency": 5, "prompt_tokens": 8, "output_tokens": 10}
    plain, with_pass = (write_manifest(tmp_path / f"{n}.yaml", manifest_data(**kw))
                        for n, kw in (("plain", {}), ("pass", {"expert_pass": xp})))
    runs = [CliRunner().invoke(main, ["plan", str(m), *j]) for m in (plain, with_pass) for j in ([], ["--json"])]
    assert all(r.exit_code == 0 for r in runs), [r.output for r in runs]
    text, doc = runs[2].output, json.loads(runs[3].output)
    arms = [a["name"] for a in doc["arms"]]
    cells = len(doc["plan"]["cells"])
    assert f"then the expert pass, untimed: one more server per arm ({', '.join(arms)})" in text
    assert f"{cells + len(arms)} server starts ({cells} cells + {len(arms)} expert pass)" in text
    assert f"{cells} server starts," in runs[0].output and "expert pass" not in runs[0].output
    before, after = json.loads(runs[1].output)["estimate"], doc["estimate"]
    start = after["assumed_start_s"]  # 5 s for the process runtime; 20 ms/token by default
    assert after["server_starts"] == before["server_starts"] + len(arms) == cells + len(arms)
    assert after["seconds"] - before["seconds"] == pytest.approx(len(arms) * (start + 2 * (10 * 0.020 + 0.05)))
