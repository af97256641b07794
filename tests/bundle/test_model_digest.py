"""model.digest: the model directory is hashed only when a run completes (an interrupted run records the digest
as deferred, without reading the model), a directory that cannot be hashed is a notice, and a directory symlink
inside the model is refused by name rather than skipped."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.bundles import SIGNED_MANIFEST

from kit.bundle import Bundle
from kit.errors import ManifestError
from kit.experiment.finish import Closing, finalize
from kit.experiment.session import BundleSession
from kit.files.run import RunFile
from kit.manifest import Manifest
from kit.plumbing.treedigest import tree_digest
from kit.signing import ManifestTrust, SigningKey, parse_envelope


def _model(root: Path) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "config.json").write_text('{"layers": 2}\n')
    (root / "sub" / "weights.bin").write_bytes(bytes(range(256)) * 300)
    return root


def _reference(root: Path) -> str:
    """The digest by its documented definition, from a listing kit did not make (sha256 of each file)."""
    lines = sorted(f"{p.relative_to(root).as_posix()}\0{hashlib.sha256(p.read_bytes()).hexdigest()}\n"
                   for p in root.rglob("*") if p.is_file())
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def _finish(bundle: Bundle, runner: SigningKey, model: Path, status: str) -> tuple[Closing, list[Any]]:
    doc = yaml.safe_load(SIGNED_MANIFEST)
    doc["model"] = {**doc["model"], "path": str(model), "digest": True}
    trust = ManifestTrust(signed=False, signers=(), allow_unsigned=True, note="test")
    c = Closing(Manifest.model_validate(doc), trust, runner, {}, {})
    finalize(BundleSession(bundle, resumed=False), c, status)
    _, body = parse_envelope(bundle.path("provenance.dsse.json").read_bytes(), "provenance")
    deps = json.loads(body)["predicate"]["buildDefinition"]["resolvedDependencies"]
    return c, [d for d in deps if d["uri"].startswith("file://")]


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_a_completed_run_signs_the_model_digest(bundle: Bundle, runner: SigningKey, tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    c, [dep] = _finish(bundle, runner, model, "complete")
    assert dep["digest"] == {"sha256": _reference(model)} and c.notices == []
    assert dep["annotations"]["files"] == 2 and dep["annotations"]["bytes"] == 256 * 300 + 14


@pytest.mark.parametrize("status", ["interrupted", "failed"])
@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_other_endings_defer_the_digest_without_reading_the_model(bundle: Bundle, runner: SigningKey,
                                                                  tmp_path: Path, status: str) -> None:
    model = _model(tmp_path / "model")
    (model / "linked").symlink_to(model / "sub")  # hashing it would fail: nothing is hashed, nothing fails
    c, [dep] = _finish(bundle, runner, model, status)
    assert dep["digest"] == {} and "error" not in dep["annotations"] and c.notices == []
    assert f"the run ended {status}" in dep["annotations"]["deferred"]
    assert bundle.read("run.json", RunFile).status == status
    (model / "linked").unlink()  # the resumed run that completes hashes then
    c, [dep] = _finish(bundle, runner, model, "complete")
    assert dep["digest"] == {"sha256": _reference(model)} and "deferred" not in dep["annotations"]


def test_a_missing_model_directory_is_a_notice_not_a_silent_empty_digest(bundle: Bundle, runner: SigningKey,
                                                                         tmp_path: Path) -> None:
    c, [dep] = _finish(bundle, runner, tmp_path / "gone", "complete")
    assert dep["digest"] == {} and "not a directory" in dep["annotations"]["error"]
    [notice] = c.notices
    assert notice.startswith(f"model.digest: {tmp_path / 'gone'} was not hashed") and "no model digest" in notice


def test_a_directory_symlink_in_the_model_is_refused_by_name(bundle: Bundle, runner: SigningKey,
                                                            tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    elsewhere = _model(tmp_path / "elsewhere")
    (model / "more").symlink_to(elsewhere / "sub")
    with pytest.raises(ManifestError, match=r"more is a symlink to a directory") as e:
        tree_digest(model)
    assert e.value.hint and "cp -rL" in e.value.hint
    c, [dep] = _finish(bundle, runner, model, "complete")
    assert "more is a symlink to a directory" in dep["annotations"]["error"] and len(c.notices) == 1


def test_a_directory_link_loop_is_refused_too(tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    os.symlink("..", model / "sub" / "up")
    with pytest.raises(ManifestError, match="up is a symlink to a directory"):
        tree_digest(model)


def test_links_to_files_and_a_linked_root_are_still_followed(tmp_path: Path) -> None:
    model = _model(tmp_path / "model")
    snap = tmp_path / "snapshot"
    (snap / "sub").mkdir(parents=True)
    for rel in ("config.json", "sub/weights.bin"):
        (snap / rel).symlink_to(model / rel)
    (tmp_path / "current").symlink_to(snap)
    assert tree_digest(tmp_path / "current").digest == _reference(model)
