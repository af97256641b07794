"""The manifest's ``expert_pass``: sglang's recorder flags by default, and a pass whose prefills could pass for
decode steps refused with the fix named (kit validate's exit 3, not a traceback)."""

from __future__ import annotations

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
