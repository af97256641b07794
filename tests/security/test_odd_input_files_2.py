"""Odd input files, continued (test_odd_input_files.py has the first part and the helpers): the places left open
there. A data file replaced after preflight is read by ``read_pinned`` as preflight read it (a FIFO refused at once,
never past its bound); preflight bounds a text dataset's file by its own 64 MiB, not by the 1 GiB of records, and
says to use a smaller file; a Dockerfile that is a FIFO or a directory is named as what it is, not "no such
Dockerfile".

On the old code the FIFO hung kit's load (plain open() waits for a writer), a 65 MiB text passed preflight and was
refused only after servers started, and the FIFO Dockerfile was "no such Dockerfile". Every test runs under the
imported ``deadline`` (SIGALRM): a call that blocks again fails the test instead of hanging it."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import BinaryIO

import pytest
from test_odd_input_files import _odd, _sparse, deadline  # noqa: F401 (deadline: autouse here too)

from kit.errors import ImageBuildError, ManifestError
from kit.images.context import collect_context
from kit.manifest import check_runnable, load_manifest
from kit.manifest.workload import (
    MAX_PINNED_BYTES,
    MAX_TEXT_BYTES,
    CaBundle,
    JsonlSet,
    ShareGptSet,
    TextSet,
    ca_problem,
    dataset_file_bound,
)
from kit.workload import corpus
from kit.workload.corpus import read_pinned

# --------------------------------------------------------------------------- read_pinned (the load's own read)


@pytest.mark.parametrize(("kind", "why"), [("fifo", "(not a regular file (prw"), ("directory", "(is a directory)")])
def test_a_data_file_replaced_by_a_fifo_after_preflight_is_refused_at_once(tmp_path: Path, kind: str,
                                                                            why: str) -> None:
    odd = _odd(tmp_path, kind, "prompts.jsonl")
    with pytest.raises(ManifestError) as e:
        read_pinned(odd, "0" * 64, f"load.dataset.file {odd}")
    assert str(e.value).startswith(f"load.dataset.file {odd}: cannot read {odd} {why}"), str(e.value)
    assert e.value.exit_code == 3 and "give a regular file" in str(e.value.hint)


def test_a_data_file_replaced_by_a_larger_one_is_refused_by_its_size_with_the_fix(tmp_path: Path) -> None:
    big = _sparse(tmp_path / "text.txt", MAX_TEXT_BYTES + 1)
    with pytest.raises(ManifestError, match=f"is {MAX_TEXT_BYTES + 1} bytes, over kit's 64 MiB bound") as e:
        read_pinned(big, "0" * 64, "load.dataset.file text.txt", MAX_TEXT_BYTES)
    assert str(e.value.hint).startswith("use a smaller file")


def test_read_pinned_reads_at_most_its_bound_and_one_byte(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file whose size says 0 (a /proc file, or one that grows once opened) is read no further than limit + 1
    bytes, then refused: the old code read on a whole 1 MiB block past the bound."""
    handed: list[int] = []

    class Counting(io.BufferedReader):
        def read(self, n: int | None = -1, /) -> bytes:
            data = super().read(n)
            handed.append(len(data))
            return data

    real = corpus.open_regular

    def counting(path: Path, *, follow: bool = True) -> BinaryIO:
        f = real(path, follow=follow)
        assert isinstance(f, io.BufferedReader)
        return Counting(f.detach())

    monkeypatch.setattr(corpus, "open_regular", counting)
    maps = Path("/proc/self/maps")  # a regular file of size 0, holding far more than 4096 bytes
    with pytest.raises(ManifestError, match=r"/proc/self/maps has more than 4096 bytes \(its size said 0\)") as e:
        read_pinned(maps, "0" * 64, "x", limit=4096)
    assert str(e.value.hint).startswith("use a smaller file")
    assert sum(handed) == 4097, handed


def test_the_bounds_have_one_definition() -> None:
    assert corpus.MAX_DATA_BYTES is MAX_PINNED_BYTES and corpus.MAX_TEXT_BYTES is MAX_TEXT_BYTES
    assert dataset_file_bound(TextSet(kind="text")) == MAX_TEXT_BYTES == 64 << 20
    assert dataset_file_bound(JsonlSet.model_validate({"kind": "jsonl", "file": {"path": "p", "sha256": "0" * 64}})) \
        == dataset_file_bound(ShareGptSet.model_validate({"kind": "sharegpt", "file": {"path": "p", "sha256": "0" * 64}})) \
        == MAX_PINNED_BYTES == 1 << 30


# --------------------------------------------------------------------------- preflight: each kind's own bound


def _manifest(tmp_path: Path, kind: str, data: Path) -> Path:
    from support.manifests import manifest_data, write_manifest

    pin = {"path": str(data), "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}  # pinned as signed
    return write_manifest(tmp_path / "m.yaml", manifest_data(load={"tokenizer": "words",
                                                                   "dataset": {"kind": kind, "file": pin}}))


def test_preflight_bounds_a_text_dataset_by_64_mib_and_says_to_use_a_smaller_file(tmp_path: Path) -> None:
    text = _sparse(tmp_path / "text.txt", 65 << 20)  # pinned by its real digest: only its size is wrong
    with pytest.raises(ManifestError) as e:
        check_runnable(load_manifest(_manifest(tmp_path, "text", text)))
    assert f"load.dataset.file {text}: {65 << 20} bytes, over kit's 64 MiB bound for this file" in str(e.value)
    assert str(e.value.hint).startswith("use a smaller file (at most 64 MiB here"), e.value.hint
    assert "Traceback" not in str(e.value)


def test_preflight_takes_a_records_file_over_64_mib(tmp_path: Path) -> None:
    records = tmp_path / "prompts.jsonl"
    records.write_bytes(b'{"prompt": "hi"}\n')
    os.truncate(records, MAX_TEXT_BYTES + 1)  # its bound is 1 GiB: preflight passes it (the load parses it)
    check_runnable(load_manifest(_manifest(tmp_path, "jsonl", records)))


def test_an_oversized_ca_bundle_says_to_use_a_smaller_file(tmp_path: Path) -> None:
    ca = _sparse(tmp_path / "ca.pem", 5 << 20)
    why = ca_problem(CaBundle(path=str(ca), sha256="0" * 64))
    assert str(why).endswith("5242880 bytes, over kit's 4 MiB bound for this file")
    assert str(getattr(why, "hint", "")).startswith("use a smaller file (at most 4 MiB here)")


# --------------------------------------------------------------------------- the Dockerfile


@pytest.fixture
def context(tmp_path: Path) -> Path:
    app = tmp_path / "images" / "app"
    app.mkdir(parents=True)
    (app / "serve.py").write_text("print('serving')\n")
    return app


@pytest.mark.parametrize(("kind", "what"), [("fifo", "not a regular file (prw"), ("directory", "a directory")])
def test_a_dockerfile_that_is_no_file_is_named_as_what_it_is(tmp_path: Path, context: Path, kind: str,
                                                             what: str) -> None:
    odd = _odd(context, kind, "Dockerfile")
    with pytest.raises(ImageBuildError) as e:
        collect_context(tmp_path, context, "Dockerfile")
    assert str(e.value).startswith(f"{odd}: the Dockerfile is {what}"), str(e.value)
    assert "make it a regular file" in str(e.value.hint)
    odd.rmdir() if kind == "directory" else odd.unlink()
    (context / "real").write_text("FROM scratch\n")
    odd.symlink_to("real")  # a link to a regular file is still a Dockerfile
    assert collect_context(tmp_path, context, "Dockerfile").dockerfile_sha256 == "link:real"


def test_a_missing_dockerfile_is_still_no_such_dockerfile(tmp_path: Path, context: Path) -> None:
    with pytest.raises(ImageBuildError, match="Dockerfile: no such Dockerfile"):
        collect_context(tmp_path, context, "Dockerfile")
    (context / "Dockerfile").symlink_to("gone")
    with pytest.raises(ImageBuildError, match="Dockerfile: no such Dockerfile"):
        collect_context(tmp_path, context, "Dockerfile")
