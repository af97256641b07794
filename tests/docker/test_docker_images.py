"""kit.images against a real engine: the engine image, OEA FROM an sglang 0.5.23 stand-in, refusals."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest
from docker_helpers import DOCKER, ROOT, SESSION_RUN, load_virtual, run_once
from support.manifests import manifest_data, manifest_yaml

from kit.errors import ExitCode, ImageBuildError
from kit.images import build_images, collect_context

pytestmark = pytest.mark.docker

OEA_WAIT_S = 300.0


def wait_for_oea_image() -> None:
    """images/oea is written by another engineer: wait for it for a while, then skip."""
    deadline = time.monotonic() + OEA_WAIT_S
    while not ((ROOT / "images/oea/Dockerfile").is_file() and (ROOT / "images/oea/apply.py").is_file()):
        if time.monotonic() > deadline:
            pytest.skip("images/oea (Dockerfile, apply.py) is not there yet")
        time.sleep(5)


def oea_manifest(base: str) -> Any:
    arms = [{"name": "baseline", "image": {"context": "images/sglang", "base": base}},
            {"name": "oea", "image": {"context": "images/oea", "base_arm": "baseline"}, "env": {"SGLANG_OEA_K0": "4"}}]
    return load_virtual(manifest_yaml(manifest_data("pytest-oea", arms=arms, **DOCKER)))


def test_engine_image_is_identified_and_runs_help(client: Any, engine_image: Any, base_image: str) -> None:
    info = engine_image
    img = client.images.get(info.image_id)
    assert info.image_id.startswith("sha256:") and info.tag in img.tags
    assert info.tag.startswith("kit/pytest-docker-engine:") and info.tag.endswith(info.recipe_sha256[:12])
    assert info.base_image_id == base_image and info.build_args == {"BASE_IMAGE": base_image}
    assert info.base_pinned and info.reference == base_image and info.base_repo_digests == []
    assert info.os == "linux" and info.architecture and len(info.diff_ids) >= 2
    assert info.diff_ids[0] == client.images.get(base_image).attrs["RootFS"]["Layers"][0]
    labels = info.labels
    for key in ("title", "created", "version", "base.name", "base.digest", "revision"):
        assert labels[f"org.opencontainers.image.{key}"], key
    assert labels["org.opencontainers.image.base.digest"] == base_image
    assert labels["kit.managed"] == "1" and labels["kit.arm"] == "engine"
    assert labels["kit.context_sha256"] == info.context_sha256 and len(labels["kit.manifest_sha256"]) == 64
    log = Path(info.build_log)
    assert hashlib.sha256(log.read_bytes()).hexdigest() == info.build_log_sha256
    assert "Successfully built" in log.read_text()
    code, out = run_once(client, info.image_id, ["python3", "-m", "kit.engine", "--help"])
    assert code == 0 and "usage: python -m kit.engine" in out
    code, out = run_once(client, info.image_id, ["sh", "-c", "id -u; ls /opt/kit/kit/engine | sort | head -3"])
    assert code == 0 and out.splitlines()[0] == "65534" and "__init__.py" in out


def test_engine_context_holds_the_included_package() -> None:
    ctx = collect_context(ROOT, ROOT / "images/engine", "Dockerfile")
    names = [rel for rel, _ in ctx.files]
    assert {"Dockerfile", "kit.include", "kit/__init__.py", "kit/engine/__main__.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith("kit/") and not (n == "kit/__init__.py" or n.startswith("kit/engine/"))]
    assert collect_context(ROOT, ROOT / "images/engine", "Dockerfile").sha256 == ctx.sha256


def test_same_recipe_rebuilds_to_the_same_image(client: Any, engine_image: Any, base_image: str,
                                                build_dir: Path) -> None:
    arms = [{"name": n, "image": {"context": "images/engine", "base": base_image}} for n in ("engine", "engine2")]
    lm = load_virtual(manifest_yaml(manifest_data("pytest-docker", arms=arms, **DOCKER)))
    again = build_images(lm, run_id="another-run", log_dir=build_dir / "again", allow_unpinned=False, client=client)
    assert again["engine"].image_id == engine_image.image_id and again["engine"].tag == engine_image.tag
    assert again["engine"].cached_steps >= 3


def test_oea_builds_from_the_baseline_of_an_sglang_standin(client: Any, sglang_standin: str, build_dir: Path) -> None:
    wait_for_oea_image()
    infos = build_images(oea_manifest(sglang_standin), run_id=SESSION_RUN, log_dir=build_dir / "oea",
                         allow_unpinned=False, client=client)
    base, oea = infos["baseline"], infos["oea"]
    # The baseline is the stand-in byte for byte: same layers, only metadata (labels) differs.
    assert base.diff_ids == client.images.get(sglang_standin).attrs["RootFS"]["Layers"]
    assert base.base_image_id == sglang_standin
    assert oea.base_arm == "baseline" and oea.build_args["BASE_IMAGE"] == base.image_id
    assert oea.base_image_id == base.image_id and oea.reference == base.tag
    assert oea.labels["org.opencontainers.image.base.digest"] == base.image_id
    assert oea.diff_ids[: len(base.diff_ids)] == base.diff_ids
    code, out = run_once(client, oea.image_id, ["cat", "/opt/kit_oea/PATCHED"])
    assert code == 0, out
    assert json.loads(out)["sglang_version"] == "0.5.23"
    log = Path(oea.build_log).read_text()
    assert "kit OEA patch: sglang 0.5.23 patched" in log or "Using cache" in log  # cached by an earlier session


def test_oea_refuses_another_sglang_version(client: Any, sglang_standin_wrong: str, build_dir: Path) -> None:
    wait_for_oea_image()
    with pytest.raises(ImageBuildError) as err:
        build_images(oea_manifest(sglang_standin_wrong), run_id=SESSION_RUN, log_dir=build_dir / "wrong",
                     allow_unpinned=False, client=client)
    e = err.value
    assert e.exit_code == ExitCode.IMAGE_BUILD_FAILED == 6
    assert "arm oea: image build failed" in e.message
    assert "kit OEA patch targets sglang 0.5.23; this image has sglang 0.5.22" in e.message
    assert "oea.build.log" in str(e.hint)


def test_placeholder_digest_is_refused_before_any_build(tmp_path: Path) -> None:
    from kit.manifest import load_manifest

    lm = load_manifest(ROOT / "experiments/oea.yaml")
    with pytest.raises(ImageBuildError) as err:
        build_images(lm, run_id="x", log_dir=tmp_path, allow_unpinned=False, client=object())
    assert err.value.exit_code == 6 and "placeholder digest (all zeros)" in err.value.message
    assert "kit lock" in str(err.value.hint)


def test_unpinned_base_is_refused_unless_allowed(client: Any, base_image: str, build_dir: Path) -> None:
    arms = [{"name": "a", "image": {"context": "images/engine", "base": "kit-local/python:bookworm"}},
            {"name": "b", "image": {"context": "images/sglang", "base_arm": "a"}}]
    lm = load_virtual(manifest_yaml(manifest_data("pytest-unpinned", arms=arms, **DOCKER)), allow_unpinned=True)
    with pytest.raises(ImageBuildError, match="not pinned by digest") as err:
        build_images(lm, run_id="x", log_dir=build_dir / "unpinned", allow_unpinned=False, client=client)
    assert "--allow-unpinned" in str(err.value.hint)
    infos = build_images(lm, run_id="x", log_dir=build_dir / "unpinned", allow_unpinned=True, client=client)
    a = infos["a"]
    assert not a.base_pinned and a.allow_unpinned and a.base_image_id == base_image
    assert a.labels["kit.unpinned_base"] == "1" and a.warnings
    assert infos["b"].base_image_id == a.image_id


def test_missing_base_names_the_reference(client: Any, build_dir: Path) -> None:
    ref = "kit-test/absent:1@sha256:" + "1" * 64
    arms = [{"name": n, "image": {"context": "images/engine", "base": ref}} for n in ("a", "b")]
    with pytest.raises(ImageBuildError) as err:
        build_images(load_virtual(manifest_yaml(manifest_data("pytest-missing", arms=arms, **DOCKER))), run_id="x", log_dir=build_dir / "m",
                     allow_unpinned=False, client=client)
    assert ref in err.value.message and "not on this machine" in err.value.message
    assert "docker pull" in str(err.value.hint) and "docker load" in str(err.value.hint)


def test_failing_step_is_an_image_build_error(client: Any, base_image: str, tmp_path: Path) -> None:
    (tmp_path / "images/broken").mkdir(parents=True)
    (tmp_path / "images/broken/Dockerfile").write_text(
        "ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nRUN echo about to fail && exit 3\n")
    arms = [{"name": "a", "image": {"context": "images/broken", "base": base_image}},
            {"name": "b", "image": {"context": "images/broken", "base_arm": "a"}}]
    with pytest.raises(ImageBuildError) as err:
        build_images(load_virtual(manifest_yaml(manifest_data("pytest-broken", arms=arms, **DOCKER)), root=tmp_path), run_id="x",
                     log_dir=tmp_path / "logs", allow_unpinned=False, client=client)
    assert "returned a non-zero code: 3" in err.value.message and "about to fail" in err.value.message
    assert (tmp_path / "logs/a.build.log").is_file() and not (tmp_path / "logs/b.build.log").exists()
    assert not client.containers.list(all=True, filters={"ancestor": base_image, "status": "exited"})
