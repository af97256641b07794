"""atomic_write never follows a symlink; read_bounded refuses special files and oversize ones; sha256_file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from kit.plumbing.files import TooLarge, append_line, atomic_write, read_bounded, sha256_file


def test_atomic_write_replaces_a_symlink_without_following_it(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("precious")
    dest = tmp_path / "out.json"
    dest.symlink_to(target)
    atomic_write(dest, b"new")
    assert not dest.is_symlink() and dest.read_bytes() == b"new"
    assert target.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere.txt", "out.json"]  # no temp file left


def test_atomic_write_sets_the_mode_and_replaces_a_file(tmp_path: Path) -> None:
    dest = tmp_path / "sub" / "f"
    atomic_write(dest, b"one")
    atomic_write(dest, b"two", mode=0o600)
    assert dest.read_bytes() == b"two" and dest.stat().st_mode & 0o777 == 0o600


def test_read_bounded_fails_at_once_on_dev_zero() -> None:
    with pytest.raises(OSError, match="not a regular file"):
        read_bounded(Path("/dev/zero"), 1024)


def test_read_bounded_does_not_block_on_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="not a regular file"):
        read_bounded(fifo, 1024)


def test_read_bounded_limits(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_bytes(b"x" * 10)
    assert read_bounded(f, 10) == b"x" * 10
    with pytest.raises(TooLarge):
        read_bounded(f, 9)
    with pytest.raises(IsADirectoryError):
        read_bounded(tmp_path, 10)
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing", 10)


def test_sha256_file_matches_hashlib_and_refuses_symlinks(tmp_path: Path) -> None:
    f = tmp_path / "f"
    data = os.urandom(3 << 20)
    f.write_bytes(data)
    assert sha256_file(f) == (hashlib.sha256(data).hexdigest(), len(data))
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(OSError):
        sha256_file(link)


def test_append_line(tmp_path: Path) -> None:
    dest = tmp_path / "a.jsonl"
    append_line(dest, b"1\n")
    append_line(dest, b"2\n")
    assert dest.read_bytes() == b"1\n2\n"


def test_a_signal_the_moment_the_temp_file_is_created_removes_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CI (stop 27): SIGTERM handled right as open() returned left ``.b.tar.gz.tmp-PID-N`` behind, since the
    open came before the try that removes it. The real open runs, then the interrupt is raised at once."""
    real_open = os.open

    def open_then_interrupted(path: str, flags: int, mode: int = 0o777) -> int:
        real_open(path, flags, mode)
        raise KeyboardInterrupt

    monkeypatch.setattr("kit.plumbing.files.os.open", open_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "b.tar.gz", b"x")
    assert list(tmp_path.iterdir()) == []


def test_a_temp_name_taken_by_someone_else_is_not_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    theirs = tmp_path / ".out.tmp-1-deadbeef"
    theirs.write_bytes(b"theirs")
    monkeypatch.setattr("kit.plumbing.files.temp_name", lambda _dest: theirs)
    with pytest.raises(FileExistsError):
        atomic_write(tmp_path / "out", b"mine")
    assert theirs.read_bytes() == b"theirs"
