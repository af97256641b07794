"""A link planted in a bundle and an archive cut short each get a fix (an outside review, 2026-12-07: both said only
what was wrong)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.bundle import Bundle, archive, verify_bundle
from kit.errors import BundleError


def test_a_planted_link_says_use_an_untouched_copy(bundle: Bundle, trust_file: Path) -> None:
    (bundle.root / "extra").symlink_to("/etc/passwd")
    with pytest.raises(BundleError, match="extra: is a symbolic link") as err:
        verify_bundle(bundle.root, [trust_file])
    assert err.value.hint is not None and "untouched copy" in err.value.hint


def test_an_archive_cut_short_says_copy_it_again(bundle: Bundle, trust_file: Path, tmp_path: Path) -> None:
    tar = tmp_path / "b.tar.gz"
    archive(bundle.root, tar)
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(tar.read_bytes()[: tar.stat().st_size // 2])
    with pytest.raises(BundleError, match=r"not a readable \.tar\.gz") as err:
        verify_bundle(cut, [trust_file])
    assert err.value.hint is not None and "copy it again" in err.value.hint
