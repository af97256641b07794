from __future__ import annotations

import gzip
import io
import os
import random
import re
import shutil
import tarfile
from pathlib import Path

import pytest

from kit.bundle import Bundle, archive, archive_sha256, verify_bundle
from kit.errors import BundleError, ExitCode, UsageError


def _scrambled_copy(src: Path, dest_parent: Path, seed: int) -> Path:
    """The same names and bytes, created in another order with other mtimes and permissions."""
    rng = random.Random(seed)
    dest = dest_parent / src.name
    dest.mkdir(parents=True)
    files = sorted(p.relative_to(src) for p in src.rglob("*") if p.is_file())
    rng.shuffle(files)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes((src / rel).read_bytes())
        os.chmod(dest / rel, rng.choice([0o600, 0o640, 0o664, 0o755]))
        t = rng.randint(1_000_000, 2_000_000_000) + rng.random()
        os.utime(dest / rel, (t, t))
    for d in [p for p in dest.rglob("*") if p.is_dir()] + [dest]:
        os.chmod(d, rng.choice([0o700, 0o750, 0o755, 0o775]))
        os.utime(d, (rng.randint(0, 2**31), rng.randint(0, 2**31)))
    return dest


def test_archive_is_deterministic(bundle: Bundle, tmp_path: Path) -> None:
    one = _scrambled_copy(bundle.root, tmp_path / "one", 1)
    two = _scrambled_copy(bundle.root, tmp_path / "two", 2)
    digests = {archive(d, tmp_path / f"{i}.tar.gz") for i, d in enumerate([bundle.root, one, two, bundle.root])}
    assert len(digests) == 1
    blobs = {(tmp_path / f"{i}.tar.gz").read_bytes() for i in range(4)}
    assert len(blobs) == 1
    assert digests == {archive_sha256(tmp_path / "0.tar.gz")}


def test_archive_headers(bundle: Bundle, tmp_path: Path) -> None:
    out = tmp_path / "b.tgz"
    archive(bundle.root, out)
    raw = out.read_bytes()
    assert raw[:3] == b"\x1f\x8b\x08"
    assert raw[3] & 0x08 == 0  # no FNAME in the gzip header
    assert raw[4:8] == b"\0\0\0\0"  # gzip mtime 0
    with tarfile.open(out, "r:gz") as tf:
        members = tf.getmembers()
    top = bundle.root.name
    names = [m.name for m in members]
    assert names[0] == top and all(n.startswith(top + "/") for n in names[1:])
    assert names[1] == f"{top}/provenance.dsse.json"  # first: a reader verifies it before writing the rest
    assert names[2:] == sorted(names[2:], key=lambda n: n.encode())
    files = sorted(n[len(top) + 1:] for n, m in zip(names, members, strict=True) if m.isfile())
    assert files == sorted([*bundle.files(), "provenance.dsse.json"])
    for m in members:
        assert (m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 0)
        assert m.mode == (0o755 if m.isdir() else 0o644)
        assert m.isdir() or m.isfile()


def test_archive_verifies_and_tampering_is_caught(bundle: Bundle, tmp_path: Path, trust_file: Path) -> None:
    out = tmp_path / "b.tar.gz"
    digest = archive(bundle.root, out)
    res = verify_bundle(out, [trust_file])
    assert res.details["trusted"] is True and res.details["archive"]["sha256"] == digest
    assert res.details["archive"]["top"] == bundle.root.name
    # the archive with one record changed (kit archive refuses to write it: test_archive_refuses_what_was_not_sealed;
    # someone else's tool need not): names the file inside the bundle
    rel = f"{bundle.root.name}/cells/oea-r1/level-4/records.jsonl"
    with tarfile.open(out, "r:gz") as src, gzip.open(tmp_path / "bad.tar.gz", "wb") as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
            if m.name == rel and data is not None:
                data = data.replace(b'"status": 200', b'"status": 500', 1)  # the same size
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
    with pytest.raises(BundleError, match=re.escape("cells/oea-r1/level-4/records.jsonl: sha256 differs")) as e:
        verify_bundle(tmp_path / "bad.tar.gz", [trust_file])
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID


def test_archive_refuses_links_special_files_and_output_inside(bundle: Bundle, tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        archive(bundle.root, bundle.root / "plots" / "self.tar.gz")
    (bundle.root / "plots" / "evil").symlink_to("/etc/passwd")
    with pytest.raises(BundleError, match="plots/evil: is a symbolic link"):
        archive(bundle.root, tmp_path / "x.tar.gz")
    (bundle.root / "plots" / "evil").unlink()
    os.mkfifo(bundle.root / "pipe")
    with pytest.raises(BundleError, match="pipe: is a special file"):
        archive(bundle.root, tmp_path / "x.tar.gz")
    assert not (tmp_path / "x.tar.gz").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_gzip_stream_is_plain(bundle: Bundle, tmp_path: Path) -> None:
    out = tmp_path / "b.tar.gz"
    archive(bundle.root, out)
    with gzip.open(out) as g:
        assert len(g.read()) % 10240 == 0  # a whole number of tar records


def test_an_unsealed_or_live_bundle_is_not_archived(bundle: Bundle, tmp_path: Path) -> None:
    """A review archived a SIGKILLed run's bundle (exit 0, no provenance, a stray temp file) and one a live kit was
    writing; `kit verify` of the archive then failed with a hint to archive it again, the same way."""
    from kit.experiment.session import lock

    fd = lock(bundle.root)  # what kit run and kit run --resume hold while they write it
    try:
        with pytest.raises(UsageError, match="in use by another kit process"):
            archive(bundle.root, tmp_path / "live.tar.gz")
    finally:
        os.close(fd)
    assert not (tmp_path / "live.tar.gz").exists()
    bundle.remove_provenance()
    with pytest.raises(BundleError) as e:
        archive(bundle.root, tmp_path / "unsealed.tar.gz")
    assert "not sealed" in e.value.message and f"kit verify {bundle.root}" in (e.value.hint or "")
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID and not (tmp_path / "unsealed.tar.gz").exists()


def test_verify_of_a_fifo_or_a_link_to_dev_zero_named_as_an_archive_says_what_it_is(tmp_path: Path) -> None:
    """Was "no such archive" for a path that exists (review)."""
    fifo = tmp_path / "f.tar.gz"
    os.mkfifo(fifo)
    zero = tmp_path / "z.tar.gz"
    zero.symlink_to("/dev/zero")
    for target in (fifo, zero):
        with pytest.raises(BundleError, match="not a regular file"):
            verify_bundle(target, [])
    with pytest.raises(UsageError, match="no such archive"):
        verify_bundle(tmp_path / "gone.tar.gz", [])


@pytest.mark.parametrize(("change", "problem"), [
    ("edit", "cells/oea-r1/level-4/records.jsonl: sha256 differs from the signed provenance"),
    ("add", "extra file not in provenance: cells/oea-r1/notes.txt"),
    ("delete", "missing file: cells/oea-r1/level-4/records.jsonl"),
])
def test_archive_refuses_what_was_not_sealed(bundle: Bundle, tmp_path: Path, change: str, problem: str) -> None:
    """Review defect 3: a sealed bundle with a record edited, a file added or one deleted was archived (exit 0, no
    word) and the receiver's `kit verify` refused it (exit 9). Now kit archive refuses it, exit 9, naming the file,
    and writes nothing."""
    copy = tmp_path / "copy" / bundle.root.name
    shutil.copytree(bundle.root, copy)
    rec = copy / "cells" / "oea-r1" / "level-4" / "records.jsonl"
    if change == "edit":
        rec.write_bytes(rec.read_bytes().replace(b'"status": 200', b'"status": 500', 1))  # the same size
    elif change == "add":
        (copy / "cells" / "oea-r1" / "notes.txt").write_bytes(b"mine\n")
    else:
        rec.unlink()
    out = tmp_path / "out" / "b.tar.gz"
    with pytest.raises(BundleError) as e:
        archive(copy, out)
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    assert problem in e.value.message, str(e.value)
    assert f"nothing was written to {out}" in str(e.value) and "kit verify" in (e.value.hint or "")
    assert not out.parent.exists() or list(out.parent.iterdir()) == []  # no archive, no temp file
    archive(bundle.root, out)  # the untouched bundle still archives
    assert out.is_file()


@pytest.mark.parametrize("name", ["run.tar", "run.zip", "run", "run.gz", "run.tar.gz.part"])
def test_archive_refuses_a_name_that_does_not_say_tar_gz(bundle: Bundle, tmp_path: Path, name: str) -> None:
    """Review defect 2: `kit archive -o run.tar` wrote gzip under a name that says otherwise; it is refused (exit 2,
    the name to use in the hint) before anything is read or written."""
    with pytest.raises(UsageError) as e:
        archive(bundle.root, tmp_path / name)
    assert e.value.exit_code == ExitCode.USAGE and ".tar.gz" in str(e.value)
    assert (e.value.hint or "").endswith(f"-o {tmp_path / name}{'.gz' if name.endswith('.tar') else '.tar.gz'}")
    assert [p.name for p in tmp_path.iterdir() if name.split(".", 1)[0] in p.name] == []  # nothing written


@pytest.mark.parametrize("name", ["run.TAR.GZ", "run.Tgz", "run.tgz"])
def test_archive_takes_tar_gz_and_tgz_in_any_case(bundle: Bundle, tmp_path: Path, name: str) -> None:
    archive(bundle.root, tmp_path / name)
    assert (tmp_path / name).read_bytes()[:2] == b"\x1f\x8b"
