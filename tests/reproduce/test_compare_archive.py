"""`kit compare` takes `kit archive` files as `kit verify` and `kit reproduce` do (an outside review, 2026-12-07:
`kit compare A run.tar.gz` said "Directory ... is a file")."""

from __future__ import annotations

import gzip
import io
import os
import resource
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from support.bundles import build_bundle

from kit.bundle import archive
from kit.cli import main
from kit.compare import compare_bundles, compare_paths
from kit.signing import SigningKey


def test_an_archive_compares_as_its_bundle(tmp_path: Path, runner: SigningKey, kit_home: Path) -> None:
    b = build_bundle(tmp_path / "results", runner)
    tar = tmp_path / "shared.tar.gz"
    archive(b.root, tar)
    renamed = tmp_path / "run.tar"  # known by its gzip bytes
    renamed.write_bytes(tar.read_bytes())
    got = compare_paths(b.root, renamed)
    want = compare_bundles(b.root, b.root)
    assert got["a"] == str(b.root) and got["b"] == str(renamed)
    assert got["figures"] == want["figures"] and all(r["ratio_b_over_a"] in (1.0, None) for r in got["figures"])
    r = CliRunner().invoke(main, ["compare", str(tar), str(b.root)])
    assert r.exit_code == 0 and f"A: {tar}" in r.output, r.output


def test_a_directory_named_like_an_archive_is_a_directory(tmp_path: Path, runner: SigningKey, kit_home: Path) -> None:
    b = build_bundle(tmp_path / "results", runner)
    named = tmp_path / "run.tgz"
    b.root.rename(named)
    got = compare_paths(named, named)
    assert got["a"] == str(named) and got["figures"]


def test_an_archive_member_its_provenance_does_not_sign_is_refused_before_it_is_written(
        tmp_path: Path, runner: SigningKey, kit_home: Path) -> None:
    """A review's bomb: a good archive plus one unsigned member of zeros (4 GiB of it compress to 4 MB) made `kit
    compare` write it all to TMPDIR and exit 0. An archive is now extracted provenance first, as `kit verify
    --integrity-only` does. The child's file-size limit (RLIMIT_FSIZE, 64 MiB) makes writing the member fail (EFBIG)."""
    b = build_bundle(tmp_path / "results", runner)
    tar = tmp_path / "bomb.tar.gz"
    archive(b.root, tar)
    with tarfile.open(tar, "r:gz") as src:
        members = [(m, src.extractfile(m).read() if m.isfile() else None)  # type: ignore[union-attr]
                   for m in src.getmembers()]
    zeros = tarfile.TarInfo(f"{b.root.name}/zz-zeros")
    zeros.size = 256 << 20
    with gzip.open(tar, "wb", compresslevel=1) as gz, tarfile.open(fileobj=gz, mode="w",
                                                                   format=tarfile.PAX_FORMAT) as dst:
        for m, data in members:
            dst.addfile(m, io.BytesIO(data) if data is not None else None)
        dst.addfile(zeros, _Zeros(zeros.size))
    (tmp_path / "t").mkdir()
    r = subprocess.run([sys.executable, "-m", "kit", "compare", str(tar), str(b.root)], capture_output=True, check=False,
                       text=True, timeout=120, env={**os.environ, "TMPDIR": str(tmp_path / "t")},
                       preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 20, 64 << 20)))
    assert r.returncode == 9, (r.returncode, r.stderr[-2000:])  # else EFBIG, writing past the limit
    assert "extra file not in provenance: zz-zeros (refused before writing any of it)" in r.stderr, r.stderr
    assert not any((tmp_path / "t").iterdir())


class _Zeros(io.RawIOBase):
    def __init__(self, n: int) -> None:
        self.left = n

    def readinto(self, b: Any) -> int:
        n = min(len(b), self.left)
        b[:n] = bytes(n)
        self.left -= n
        return n

    def readable(self) -> bool:
        return True
