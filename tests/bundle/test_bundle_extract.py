"""Hostile archives: refused with exit 9, nothing written outside a fresh temp dir, which is removed."""

from __future__ import annotations

import gzip
import io
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import kit.bundle.extract as archive_mod
from kit.bundle import Bundle, archive, safe_extract, verify_bundle
from kit.errors import BundleError, ExitCode


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Send tempfile's directory somewhere we can watch; it must be empty again afterwards."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    yield tmp
    assert list(tmp.iterdir()) == []


def _member(name: str, data: bytes | None = b"x", *, type_: bytes = tarfile.REGTYPE,
            linkname: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    ti = tarfile.TarInfo(name)
    ti.type = type_
    ti.linkname = linkname
    ti.size = len(data) if data is not None and type_ == tarfile.REGTYPE else 0
    if type_ == tarfile.CHRTYPE:
        ti.devmajor, ti.devminor = 1, 3
    if "\x00" in name:
        ti.pax_headers = {"path": name}  # a ustar name field would just end at the NUL
    return ti, data


def _tgz(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]], fmt: int = tarfile.PAX_FORMAT) -> Path:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        for ti, data in members:
            tf.addfile(ti, io.BytesIO(data) if data is not None and ti.type == tarfile.REGTYPE else None)
    path.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    return path


def _refused(archive_path: Path, *words: str) -> None:
    """``kit verify`` refuses it (exit 9), and so does the structural extraction alone, naming ``words``."""
    with pytest.raises(BundleError) as e:
        verify_bundle(archive_path, [])
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    dest = Path(tempfile.mkdtemp())
    with pytest.raises(BundleError) as e2:
        safe_extract(archive_path, dest)
    assert e2.value.exit_code == ExitCode.BUNDLE_INVALID
    for w in words:
        assert w in e2.value.message, e2.value.message
    shutil.rmtree(dest)


def _d(name: str) -> tuple[tarfile.TarInfo, bytes | None]:
    return _member(name, None, type_=tarfile.DIRTYPE)


HOSTILE = {
    "dotdot": ([_d("top"), _member("top/../../x")], "'..' component"),
    "dotdot-top": ([_member("../x")], "'..' component"),
    "absolute": ([_member("/tmp/kit-test-absolute-x")], "absolute path"),
    "symlink": ([_d("top"), _member("top/link", None, type_=tarfile.SYMTYPE, linkname="/etc/passwd")],
                "symbolic link"),
    "symlink-dir-then-write": ([_d("top"), _member("top/d", None, type_=tarfile.SYMTYPE, linkname="../.."),
                                _member("top/d/x")], "symbolic link"),
    "hardlink": ([_d("top"), _member("top/a"), _member("top/h", None, type_=tarfile.LNKTYPE, linkname="top/a")],
                 "hard link"),
    "chardev": ([_d("top"), _member("top/null", None, type_=tarfile.CHRTYPE)], "character device"),
    "blockdev": ([_d("top"), _member("top/sda", None, type_=tarfile.BLKTYPE)], "block device"),
    "fifo": ([_d("top"), _member("top/pipe", None, type_=tarfile.FIFOTYPE)], "FIFO"),
    "duplicate": ([_d("top"), _member("top/a", b"1"), _member("top/a", b"2")], "duplicate name"),
    "dup-dir": ([_d("top"), _d("top/d"), _d("top/d")], "duplicate name"),
    "dot-slash": ([_d("top"), _member("top/a"), _member("./top/a")], "'.' component"),
    "double-slash": ([_d("top"), _member("top//a")], "empty or '.' component"),
    "two-tops": ([_member("top/a"), _member("other/b")], "second top folder"),
    "file-at-top": ([_member("loose.txt")], "outside the top folder"),
    "backslash": ([_member("top\\..\\x")], "backslash"),
    "nul": ([_member("top/a\x00b")], "NUL"),
    "control": ([_member("top/a\nb")], "control character"),
    "file-then-dir": ([_member("top/a"), _member("top/a/b")], "extraction failed"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_archives_are_refused(case: str, tmp_path: Path, sandbox: Path) -> None:
    members, why = HOSTILE[case]
    evil = _tgz(tmp_path / f"{case}.tar.gz", members)
    before = sorted(p for p in tmp_path.rglob("*"))
    _refused(evil, why)
    assert sorted(p for p in tmp_path.rglob("*")) == before  # nothing new anywhere under tmp_path
    assert not Path("/tmp/kit-test-absolute-x").exists()
    assert not (tmp_path / "x").exists()


def test_huge_member_count(tmp_path: Path, sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    evil = _tgz(tmp_path / "many.tar.gz", [_d("top")] + [_member(f"top/f{i}", b"") for i in range(60)])
    monkeypatch.setattr(archive_mod, "MAX_MEMBERS", 50)
    _refused(evil, "more than 50 members")
    dest = tmp_path / "direct"
    dest.mkdir()
    with pytest.raises(BundleError, match="more than 10 members"):
        safe_extract(evil, dest, max_members=10)


def test_total_size_cap_and_gzip_bomb(tmp_path: Path, sandbox: Path) -> None:
    big = _tgz(tmp_path / "big.tar.gz", [_d("top"), _member("top/a", b"\0" * 200_000),
                                         _member("top/b", b"\0" * 200_000)])
    dest = tmp_path / "direct"
    dest.mkdir()
    with pytest.raises(BundleError, match="content exceeds 300000 bytes"):
        safe_extract(big, dest, max_bytes=300_000)
    bomb = tmp_path / "bomb.tar.gz"
    bomb.write_bytes(gzip.compress(b"\0" * 5_000_000))  # decompresses to far more than the cap allows
    dest2 = tmp_path / "direct2"
    dest2.mkdir()
    with pytest.raises(BundleError):
        safe_extract(bomb, dest2, max_members=1, max_bytes=1000)


def test_oversized_pax_header_is_refused(tmp_path: Path, sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ti, data = _member("top/" + "n" * 3000)  # a long name needs a pax header of a few KB
    evil = _tgz(tmp_path / "pax.tar.gz", [_d("top"), (ti, data)])
    monkeypatch.setattr(archive_mod, "MAX_HEADER_BYTES", 1000)
    _refused(evil, "header of")


def test_not_gzip_or_truncated(tmp_path: Path, sandbox: Path, bundle: Bundle) -> None:
    plain = tmp_path / "plain.tar.gz"
    with tarfile.open(plain, "w") as tf:
        tf.addfile(tarfile.TarInfo("top"))
    _refused(plain, "not a readable .tar.gz")
    good = tmp_path / "good.tar.gz"
    archive(bundle.root, good)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    _refused(cut)
    _refused(_tgz(tmp_path / "empty.tar.gz", []), "empty archive")


def test_extra_member_in_a_real_archive(bundle: Bundle, tmp_path: Path, sandbox: Path, trust_file: Path) -> None:
    good = tmp_path / "good.tar.gz"
    archive(bundle.root, good)
    with tarfile.open(good, "r:gz") as tf:
        members = [(m, tf.extractfile(m).read() if m.isfile() else None) for m in tf]  # type: ignore[union-attr]
    top = bundle.root.name
    evil = _tgz(tmp_path / "extra.tar.gz", [*members, _member(f"{top}/cells/smuggled.txt", b"hi\n")])
    with pytest.raises(BundleError, match=re.escape("extra file not in provenance: cells/smuggled.txt")):
        verify_bundle(evil, [trust_file])


def test_safe_extract_needs_an_empty_directory(bundle: Bundle, tmp_path: Path) -> None:
    good = tmp_path / "good.tar.gz"
    archive(bundle.root, good)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "already").write_text("x")
    with pytest.raises(BundleError, match="new, empty directory"):
        safe_extract(good, dest)
    (dest / "already").unlink()
    root = safe_extract(good, dest)
    assert root == dest / bundle.root.name
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()) == \
        sorted([*bundle.files(), "provenance.dsse.json"])
    assert all((p.stat().st_mode & 0o777) == 0o644 for p in root.rglob("*") if p.is_file())


def test_nothing_after_the_end_of_the_archive(bundle: Bundle, tmp_path: Path, sandbox: Path,
                                              trust_file: Path) -> None:
    """A verified archive holds nothing else: a second gzip member (a second tar) after a signed bundle's end
    would be extracted, unchecked, by `tar -xzi` (GNU tar's --ignore-zeros, checked here when tar is installed);
    only tar's zero padding may follow the end-of-archive block. The digest reported is of the bytes read."""
    good = tmp_path / "good.tar.gz"
    digest = archive(bundle.root, good)
    assert verify_bundle(good, [trust_file]).details["archive"]["sha256"] == digest  # type: ignore[index]
    padded = tmp_path / "padded.tar.gz"  # more zero blocks inside the gzip stream: still only padding
    padded.write_bytes(gzip.compress(gzip.decompress(good.read_bytes()) + b"\0" * 50_000, mtime=0))
    verify_bundle(padded, [trust_file])
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        ti, data = _member(f"{bundle.root.name}/smuggled.txt", b"never checked\n")
        tf.addfile(ti, io.BytesIO(data or b""))
    evil = tmp_path / "appended.tar.gz"
    evil.write_bytes(good.read_bytes() + gzip.compress(buf.getvalue(), mtime=0))
    if shutil.which("tar"):  # what another tool makes of it: the smuggled file is there
        out = tmp_path / "gnutar"
        out.mkdir()
        subprocess.run(["tar", "-xzif", str(evil), "-C", str(out)], check=True, capture_output=True)
        assert (out / bundle.root.name / "smuggled.txt").is_file()
    with pytest.raises(BundleError, match="data after the end of the archive") as e:
        verify_bundle(evil, [trust_file])
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    dest = Path(tempfile.mkdtemp())
    with pytest.raises(BundleError, match="data after the end of the archive"):
        safe_extract(evil, dest)
    shutil.rmtree(dest)
