"""`kit reproduce` of a docker-runtime bundle against a real Docker engine: the arms' images are rebuilt from the
pinned base and the signed contexts, and each arm's identity is reported: the same image ID, or the same recipe
(base, Dockerfile, context, build args) with the image ID and the layers that differ named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.manifests import engine_command, manifest_data, write_manifest
from support.ports import free_port

from kit.signing import generate_key

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "docker"))
from docker_helpers import BASE_IMAGE, run_cmd, unavailable  # noqa: E402

pytestmark = pytest.mark.docker

MANIFEST_DIR = ROOT / ".cache" / "test-manifests"  # inside the project (images/ is found), ignored by git
EXAMPLE_KEY = ROOT / "keys" / "example_ed25519"


@pytest.fixture(scope="module")
def base_image() -> str:
    r = run_cmd([str(ROOT / "scripts" / "ensure-docker")], 300)
    if r.returncode != 0:
        unavailable(f"no Docker engine and ./scripts/ensure-docker failed: {r.stderr.strip()[-500:]}")
    r = run_cmd([str(ROOT / "scripts" / "build-base-image"), BASE_IMAGE], 900)
    if r.returncode != 0:
        unavailable(f"scripts/build-base-image failed: {r.stderr.strip()[-800:]}")
    return r.stdout.strip().splitlines()[-1]


@pytest.fixture
def manifest(base_image: str) -> Iterator[Path]:
    image = {"context": "images/engine", "base": base_image}  # a local image ID is pinned
    data = manifest_data(
        "repro-docker", runtime="docker", port=free_port(), served_name="kit-moe", command=engine_command("python3"),
        arms=[{"name": "baseline", "image": image}, {"name": "oea", "image": image, "args": ["--oea-k0", "2"]}],
        server={"container_port": 8000, "ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [4], "requests_per_level": 8, "warmup_requests": 2, "prompt_tokens": 8, "output_tokens": 8,
              "seed": 5, "request_timeout_s": 60},
        design={"repeats": 2, "order": "interleaved"}, gates={"port_deadline_s": 2})
    path = write_manifest(MANIFEST_DIR / f"repro-docker-{uuid.uuid4().hex[:6]}.yaml", data)
    yield path
    for p in (path, path.with_name(path.name + ".sig")):
        p.unlink(missing_ok=True)


def kit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=900, check=False)


def test_a_docker_bundle_is_rebuilt_and_its_image_identities_reported(manifest: Path, tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    runner = generate_key(tmp_path / "runner", "runner@test")
    example = (ROOT / "keys" / "example_ed25519.pub").read_text().split()
    policy = tmp_path / "policy"
    policy.write_text(f'kit-example namespaces="kit-manifest" {example[0]} {example[1]}\n'
                      f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    assert kit("sign", str(manifest), "--key", str(EXAMPLE_KEY), env=env).returncode == 0  # contexts signed too
    r = kit("run", str(manifest), "--out", str(tmp_path / "a"), "--trust", str(policy), "--key", str(runner.path),
            env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    (original,) = list((tmp_path / "a").iterdir())
    tar = tmp_path / "shared.tar.gz"
    assert kit("archive", str(original), "-o", str(tar), env=env).returncode == 0

    dry = kit("reproduce", str(tar), "--project", str(ROOT), "--trust", str(policy), "--dry-run", env=env)
    recorded = json.loads((original / "images.json").read_text())
    assert dry.returncode == 0, dry.stderr
    assert f"would rebuild oea: images/engine (context sha256 {recorded['oea']['context_sha256'][:16]}..." in dry.stdout
    assert f"the source recorded image {recorded['oea']['image_id']}" in dry.stdout

    r = kit("reproduce", str(tar), "--out", str(tmp_path / "b"), "--project", str(ROOT), "--trust", str(policy),
            "--key", str(runner.path), env=env)
    (new,) = list((tmp_path / "b").iterdir())
    report = json.loads((new / "reproduce.json").read_text())
    assert r.returncode == {"reproduced": 0, "inconsistent": 10, "imprecise": 11}[report["verdict"]], r.stderr
    rebuilt = json.loads((new / "images.json").read_text())
    for ident in report["images"]:
        arm = ident["arm"]
        assert ident["original"] == recorded[arm]["image_id"] and ident["new"] == rebuilt[arm]["image_id"]
        if rebuilt[arm]["image_id"] == recorded[arm]["image_id"]:
            assert ident["status"] == "identical" and ident["differences"] == []
        else:  # the same recipe; the differing ID and the layers are named
            assert ident["status"] == "same_recipe", ident
            assert ident["differences"][0].startswith("image ID ") and "layers (diff_ids)" in ident["differences"][-1]
        for field in ("context_sha256", "dockerfile_sha256", "reference", "build_args"):
            assert rebuilt[arm][field] == recorded[arm][field]
    rows = {row["what"]: row for row in report["setup"]}
    assert rows["Docker engine"]["same"] and rows["runtime"]["original"] == "docker"
    assert "what each arm ran:" in r.stdout
    assert kit("verify", str(new), "--trust", str(policy), env=env).returncode == 0
