"""kit lock: tags resolved to digests, only the base lines rewritten; offline it fails clearly (exit 6)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from docker.errors import APIError
from docker_helpers import ROOT

from kit.errors import ExitCode, ImageBuildError
from kit.images import LockChange, lock_manifest, split_reference
from kit.manifest import load_manifest

DIGEST = "sha256:" + "ab" * 32
ZERO = "sha256:" + "0" * 64


class FakeRegistryData:
    def __init__(self, digest: str) -> None:
        self.id = digest


class FakeImages:
    def __init__(self, digests: dict[str, str], error: str | None = None) -> None:
        self.digests = digests
        self.error = error
        self.asked: list[str] = []

    def get_registry_data(self, name: str) -> FakeRegistryData:
        self.asked.append(name)
        if self.error:
            raise APIError(self.error, explanation=self.error)
        return FakeRegistryData(self.digests[name])


class FakeClient:
    def __init__(self, images: FakeImages) -> None:
        self.images = images


def copy_oea(tmp_path: Path) -> Path:
    (tmp_path / "experiments").mkdir()
    path = tmp_path / "experiments" / "oea.yaml"
    shutil.copy(ROOT / "experiments" / "oea.yaml", path)
    return path


def test_split_reference() -> None:
    assert split_reference("lmsysorg/sglang:v0.5.23-cu130@" + ZERO) == ("lmsysorg/sglang", "v0.5.23-cu130", ZERO)
    assert split_reference("localhost:5000/a/b:1") == ("localhost:5000/a/b", "1", None)
    assert split_reference("localhost:5000/a/b") == ("localhost:5000/a/b", None, None)
    assert split_reference("repo@" + DIGEST) == ("repo", None, DIGEST)


def test_lock_rewrites_only_the_placeholder_line(tmp_path: Path) -> None:
    path = copy_oea(tmp_path)
    before = path.read_text()
    images = FakeImages({"lmsysorg/sglang:v0.5.23-cu130": DIGEST})
    changes = lock_manifest(path, client=FakeClient(images))
    after = path.read_text()
    old = f"lmsysorg/sglang:v0.5.23-cu130@{ZERO}"
    new = f"lmsysorg/sglang:v0.5.23-cu130@{DIGEST}"
    line = next(i for i, text in enumerate(before.splitlines(), 1) if old in text)
    assert changes == [LockChange("baseline", line, old, new)]
    assert "line" in str(changes[0]) and new in str(changes[0])
    b, a = before.splitlines(keepends=True), after.splitlines(keepends=True)
    assert len(a) == len(b)
    assert [i for i, (x, y) in enumerate(zip(b, a, strict=True), 1) if x != y] == [line]
    assert a[line - 1] == b[line - 1].replace(old, new)
    assert "# The digest below is a placeholder" in after  # comments kept
    lm = load_manifest(path)
    assert lm.manifest.arm("baseline").image.base == new  # type: ignore[union-attr]
    # Locked: a second run asks nothing and changes nothing; --update asks again.
    assert lock_manifest(path, client=FakeClient(images)) == []
    assert images.asked == ["lmsysorg/sglang:v0.5.23-cu130"]
    images.digests["lmsysorg/sglang:v0.5.23-cu130"] = "sha256:" + "cd" * 32
    assert len(lock_manifest(path, client=FakeClient(images), update=True)) == 1


def test_lock_pins_an_unpinned_tag(tmp_path: Path) -> None:
    path = copy_oea(tmp_path)
    path.write_text(path.read_text().replace(f"lmsysorg/sglang:v0.5.23-cu130@{ZERO}", "lmsysorg/sglang:v0.5.23-cu130"))
    changes = lock_manifest(path, client=FakeClient(FakeImages({"lmsysorg/sglang:v0.5.23-cu130": DIGEST})))
    assert [c.new for c in changes] == [f"lmsysorg/sglang:v0.5.23-cu130@{DIGEST}"]
    load_manifest(path)  # pinned now: loads without allow_unpinned


def test_lock_offline_fails_and_leaves_the_file(tmp_path: Path) -> None:
    path = copy_oea(tmp_path)
    before = path.read_bytes()
    msg = 'Get "https://registry.example/v2/": dial tcp: lookup registry.example: no such host'
    with pytest.raises(ImageBuildError) as err:
        lock_manifest(path, client=FakeClient(FakeImages({}, error=msg)))
    assert err.value.exit_code == ExitCode.IMAGE_BUILD_FAILED
    assert "cannot resolve lmsysorg/sglang:v0.5.23-cu130" in err.value.message and "no such host" in err.value.message
    assert "reaches the registry" in str(err.value.hint)
    assert path.read_bytes() == before


@pytest.mark.docker
def test_lock_against_this_offline_engine(client: Any, tmp_path: Path) -> None:
    path = copy_oea(tmp_path)
    before = path.read_bytes()
    try:
        changes = lock_manifest(path, client=client)
    except ImageBuildError as e:  # no registry here (the usual case on these machines)
        assert "cannot resolve lmsysorg/sglang:v0.5.23-cu130 from its registry" in e.message
        assert path.read_bytes() == before
    else:
        assert [c.arm for c in changes] == ["baseline"]
        assert changes[0].new.startswith("lmsysorg/sglang:v0.5.23-cu130@sha256:")
