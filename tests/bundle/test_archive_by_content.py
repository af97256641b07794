"""An archive is known by its bytes (gzip's magic, 1f 8b), not only by a lowercase .tar.gz/.tgz name
(kit.bundle.extract.is_archive).

Review defect 2: `kit verify run.tar` of what `kit archive -o run.tar` wrote was read as a manifest ("file is 1442387
bytes; manifests are limited to 1048576 bytes", exit 3), and so was run.TAR.GZ."""

from __future__ import annotations

import gzip
import os
import shutil
from pathlib import Path

import pytest

from kit.bundle import Bundle, archive, verify_bundle
from kit.bundle.extract import is_archive
from kit.errors import BundleError, ExitCode, KitError
from kit.verify import verify_target


@pytest.mark.parametrize("name", ["run.tar", "RUN.TAR.GZ", "run.TGZ", "bundle-without-a-suffix"])
def test_verify_reads_an_archive_whatever_its_name(bundle: Bundle, tmp_path: Path, trust_file: Path,
                                                   name: str) -> None:
    digest = archive(bundle.root, tmp_path / "b.tar.gz")
    target = tmp_path / name
    shutil.copyfile(tmp_path / "b.tar.gz", target)
    for res in (verify_target(target, [trust_file]), verify_bundle(target, [trust_file])):
        assert res.details["trusted"] is True
        assert res.details["archive"] == {"path": str(target), "sha256": digest, "top": bundle.root.name}


def test_a_gzip_that_is_no_bundle_is_judged_as_an_archive(tmp_path: Path, trust_file: Path) -> None:
    """Not a manifest error about its size: a bundle error about the archive (exit 9)."""
    blob = tmp_path / "data.bin"
    blob.write_bytes(gzip.compress(os.urandom(2 << 20), mtime=0))
    with pytest.raises(BundleError) as e:
        verify_target(blob, [trust_file])
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID and "manifest" not in str(e.value), str(e.value)


def test_what_is_not_gzip_is_not_an_archive_and_nothing_blocks(tmp_path: Path, trust_file: Path) -> None:
    text = tmp_path / "m.yaml"
    text.write_bytes(b"name: x\n")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)  # no writer: an open that waited for one would hang the test
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert [is_archive(p) for p in (text, fifo, zero, empty, tmp_path / "absent", tmp_path)] == [False] * 6
    assert is_archive(tmp_path / "named.tar.gz")  # by its name, even before it exists: the caller says what is wrong
    with pytest.raises(KitError) as e:  # a manifest still goes to the manifest check
        verify_target(text, [trust_file])
    assert e.value.exit_code != ExitCode.BUNDLE_INVALID
