"""What validate, plan and run say about a manifest that cannot run here (issue 21): a placeholder digest is
refused unless the manifest is a template; a template validates and plans but never runs; a model.path this host
does not have is an error where this host serves it (docker, process) and a note where nodes do (slurm)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.manifests import manifest_data, write_manifest

from kit.cli import main
from kit.manifest import is_placeholder_digest

ROOT = Path(__file__).resolve().parents[2]
REAL = "sha256:" + hashlib.sha256(b"an image").hexdigest()


def _docker(base: str, **sections: object) -> dict[str, object]:
    arms = [{"name": "baseline", "image": {"context": "images/engine", "base": base}},
            {"name": "oea", "image": {"context": "images/engine", "base_arm": "baseline"}}]
    return manifest_data(runtime="docker", arms=arms, **sections)


def _invoke(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


@pytest.mark.parametrize("digest", ["0" * 64, "f" * 64, "ab" * 32, "deadbeef" * 8, "0123456789abcdef" * 4])
def test_a_placeholder_digest_is_refused_by_validate(tmp_path: Path, digest: str) -> None:
    base = f"lmsysorg/sglang:v0.5.23@sha256:{digest}"
    path = write_manifest(tmp_path / "m.yaml", _docker(base))
    for command in (["validate"], ["plan"], ["sign", "--key", str(tmp_path / "k")]):
        code, out = _invoke(*command, str(path))
        assert code == 3, out
        assert "arms[0].image.base" in out and "placeholder digest" in out and "line " in out
        assert f"kit lock {path}" in out and "template: true" in out and "Traceback" not in out
    assert is_placeholder_digest(base) and is_placeholder_digest(f"sha256:{digest}")
    if digest != "0" * 64:
        return  # kit run once (it spawns kit)
    p = subprocess.run([sys.executable, "-m", "kit", "run", str(path), "--allow-unsigned", "--out",
                        str(tmp_path / "r")], capture_output=True, text=True, check=False, cwd=ROOT, timeout=120)
    assert p.returncode == 3 and "placeholder digest" in p.stderr, p.stderr


def test_a_real_digest_is_not_a_placeholder(tmp_path: Path) -> None:
    assert not is_placeholder_digest(f"lmsysorg/sglang:v1@{REAL}") and not is_placeholder_digest("sglang:v1")
    code, out = _invoke("validate", str(write_manifest(tmp_path / "m.yaml", _docker(f"sglang:v1@{REAL}"))))
    assert code == 0 and "a template" not in out, out


def test_a_template_validates_and_plans_but_never_runs(tmp_path: Path) -> None:
    path = write_manifest(tmp_path / "m.yaml", _docker(f"sglang:v1@sha256:{'0' * 64}", template=True))
    code, out = _invoke("validate", str(path))
    assert code == 0 and "a template: it validates and plans, never runs" in out, out
    code, out = _invoke("plan", str(path))
    assert code == 0 and "a template: it plans, but never runs" in out.splitlines()[0], out
    out_dir = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "kit", "run", str(path), "--allow-unsigned", "--out", str(out_dir)],
                       capture_output=True, text=True, check=False, cwd=ROOT, timeout=120)
    assert p.returncode == 3, p.stderr
    assert "is a template (template: true): it validates and plans, but never runs" in p.stderr
    for step in (f"kit lock {path}", "remove `template: true`", f"kit sign {path}"):
        assert step in p.stderr, (step, p.stderr)
    assert not out_dir.exists() or not any(out_dir.iterdir())  # refused before any bundle, gate or build
    assert "Traceback" not in p.stderr


def test_the_flagship_oea_manifest_is_a_signed_template(tmp_path: Path) -> None:
    """experiments/oea.yaml pins the all-zeros placeholder: it verifies (signed by the example key) as a template,
    and kit run refuses it, trusted or not, before any gate."""
    oea = ROOT / "experiments" / "oea.yaml"
    code, out = _invoke("verify", "--trust", str(ROOT / "allowed_signers"), str(oea))
    assert code == 0 and "TRUSTED" in out, out
    code, out = _invoke("validate", str(oea))
    assert code == 0 and "a template" in out, out
    p = subprocess.run([sys.executable, "-m", "kit", "run", str(oea), "--trust", "allowed_signers",
                        "--out", str(tmp_path / "r")], capture_output=True, text=True, check=False, cwd=ROOT,
                       timeout=120, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                         "XDG_STATE_HOME": str(tmp_path / "state"),
                                         "KIT_LOCK_DIR": os.environ["KIT_LOCK_DIR"]})
    assert p.returncode == 3 and "is a template" in p.stderr, p.stderr
    assert not (tmp_path / "r").exists()


def test_a_missing_model_path_is_caught_by_validate_plan_and_run(tmp_path: Path) -> None:
    missing = tmp_path / "models" / "nope"
    path = write_manifest(tmp_path / "m.yaml", manifest_data(model={"served_name": "m", "path": str(missing)}))
    for command in ("validate", "plan"):
        code, out = _invoke(command, str(path))
        assert code == 3, out
        assert f"model.path '{missing}' does not exist on this host" in out and "Traceback" not in out
        assert "give the model's directory as it is on this machine" in out
    out_dir = tmp_path / "results"
    p = subprocess.run([sys.executable, "-m", "kit", "run", str(path), "--allow-unsigned", "--out", str(out_dir)],
                       capture_output=True, text=True, check=False, cwd=ROOT, timeout=120)
    assert p.returncode == 3 and "does not exist on this host" in p.stderr, p.stderr
    assert not out_dir.exists() or not any(out_dir.iterdir())
    missing.mkdir(parents=True)
    code, out = _invoke("validate", str(path))
    assert code == 0 and "note:" not in out, out


def test_kit_submit_refuses_a_missing_model_path_before_anything_is_queued(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kit_home: Path) -> None:
    """kit submit checks model.path on the submit host (docs/slurm.md): exit 3, saying the path is opened on the
    compute node and what to do when only the nodes have it; sbatch (a stand-in on PATH that records a call) never
    runs and nothing is written."""
    missing = tmp_path / "models" / "nope"
    path = write_manifest(tmp_path / "m.yaml", manifest_data(model={"served_name": "m", "path": str(missing)}))
    bin_dir, called = tmp_path / "bin", tmp_path / "sbatch-called"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\ntouch {called}\necho 7\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    code, out = _invoke("submit", str(path), "--allow-unsigned", "--out", str(tmp_path / "r"))
    assert code == 3 and f"model.path '{missing}' does not exist on this host" in out, out
    assert "kit submit checks model.path here, on the host it submits from" in out and "srun kit run" in out, out
    assert not called.exists() and not (tmp_path / "r").exists()


def test_a_relative_model_path_is_taken_from_where_kit_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_manifest(tmp_path / "m.yaml", manifest_data(model={"served_name": "m", "path": "weights/m"}))
    monkeypatch.chdir(tmp_path)
    code, out = _invoke("validate", str(path))
    assert code == 3 and f"model.path 'weights/m' ({tmp_path / 'weights/m'}) does not exist" in out, out
    (tmp_path / "weights" / "m").mkdir(parents=True)
    assert _invoke("validate", str(path))[0] == 0


def test_docker_names_the_mount_and_slurm_only_notes_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    docker = write_manifest(tmp_path / "d.yaml", _docker(f"sglang:v1@{REAL}", model={"served_name": "m",
                                                                                       "path": missing}))
    code, out = _invoke("validate", str(docker))
    assert code == 3 and "the directory mounted into the container" in out, out
    slurm = manifest_data(runtime="slurm", hardware={"nodes": 2}, model={"served_name": "m", "path": missing})
    path = write_manifest(tmp_path / "s.yaml", slurm)
    code, out = _invoke("validate", str(path))
    assert code == 0, out
    assert f"note: model.path '{missing}' does not exist on this host; runtime slurm: every node" in out
    code, out = _invoke("plan", str(path))
    assert code == 0 and "! model.path" in out, out


def test_model_path_placeholder_needs_a_model_path(tmp_path: Path) -> None:
    data = manifest_data(command=["{python}", "-m", "server", "{model_path}", "--port", "{port}"])
    code, out = _invoke("validate", str(write_manifest(tmp_path / "m.yaml", data)))
    assert code == 3 and "passes {model_path} but model.path is not set" in out, out
