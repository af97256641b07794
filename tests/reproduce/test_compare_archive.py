"""`kit compare` takes `kit archive` files as `kit verify` and `kit reproduce` do (an outside review, 2026-12-07:
`kit compare A run.tar.gz` said "Directory ... is a file")."""

from __future__ import annotations

from pathlib import Path

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
