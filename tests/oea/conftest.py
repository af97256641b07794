"""Fixtures for the OEA image tests (helpers live in oea_helpers.py)."""

from __future__ import annotations

import os
from pathlib import Path
from types import ModuleType

import pytest
from oea_helpers import SGLANG_VERSION, download_wheel, extract_tree, load_apply


@pytest.fixture
def apply_mod() -> ModuleType:
    return load_apply()


@pytest.fixture(scope="session")
def sglang_wheel() -> Path:
    """The sglang 0.5.23 wheel from PyPI, downloaded once into ~/.cache/kit-test/ (shared by clones)."""
    wheel, complaint = download_wheel()
    if wheel is None:
        reason = f"cannot download sglang=={SGLANG_VERSION} from PyPI: {complaint}"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return wheel


@pytest.fixture
def sglang_tree(sglang_wheel: Path, tmp_path: Path) -> Path:
    """A fresh, unpatched copy of the sglang 0.5.23 files apply.py needs, as a site-packages-like dir."""
    return extract_tree(sglang_wheel, tmp_path / "site-packages")
