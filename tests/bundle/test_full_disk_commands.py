"""A full disk under the commands that are not `kit run` (which has its own test, tests/e2e/test_crash_full_disk.py):
exit 14 with what is wrong and the fix, never "internal error" (exit 1), and never exit 9, which says a bundle failed
verification: a verifier whose temp folder is full has learnt nothing about the archive. On a real tmpfs."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.disks import fill, tmpfs

from kit.bundle import Bundle, archive
from kit.cli import main
from kit.errors import ExitCode


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, filled to its last byte (skipped where mount is not allowed)."""
    with tmpfs(tmp_path / "disk", "1m") as disk:
        fill(disk)
        yield disk


def _storage_failure(output: str, exit_code: int) -> None:
    assert exit_code == ExitCode.STORAGE == 14, output
    assert "no space left on the device" in output and "[Errno 28]" in output, output
    assert "internal error" not in output and "Traceback" not in output, output


def test_kit_archive_onto_a_full_disk(bundle: Bundle, full_disk: Path) -> None:
    out = full_disk / "b.tar.gz"
    res = CliRunner().invoke(main, ["archive", str(bundle.root), "-o", str(out)])
    _storage_failure(res.output, res.exit_code)
    assert "then run the command again" in res.output
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no partial archive left behind


def test_kit_verify_of_an_archive_with_a_full_temp_folder(bundle: Bundle, trust_file: Path, tmp_path: Path,
                                                          full_disk: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "b.tar.gz"
    archive(bundle.root, good)
    cli = CliRunner()
    assert cli.invoke(main, ["verify", "--trust", str(trust_file), str(good)]).exit_code == 0
    monkeypatch.setattr(tempfile, "tempdir", str(full_disk))  # what TMPDIR=DISK gives a fresh process
    res = cli.invoke(main, ["verify", "--trust", str(trust_file), str(good)])
    _storage_failure(res.output, res.exit_code)
    assert "the archive was not judged" in res.output and str(full_disk) in res.output
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]


def test_kit_archive_and_report_on_a_read_only_file_system(bundle: Bundle, tmp_path: Path) -> None:
    """A review: `kit archive -o` into a read-only place and `kit report` of a bundle on a read-only mount ended
    with 'internal error: OSError: [Errno 30]' (exit 1). Now exit 14, naming the path and the fix."""
    import subprocess

    with tmpfs(tmp_path / "ro", "1m") as disk:
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        res = CliRunner().invoke(main, ["archive", str(bundle.root), "-o", str(disk / "b.tar.gz")])
        assert res.exit_code == ExitCode.STORAGE, res.output
        assert "read-only file system" in res.output and "make it writable" in res.output, res.output
        assert "internal error" not in res.output and "Traceback" not in res.output, res.output
