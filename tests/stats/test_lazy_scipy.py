"""scipy comes to kit's modules through one helper, kit.stats.lazy: no module of kit imports it itself (at the top,
where every `python -m kit` start would pay for it, or inside a function in its own way), and the helper hands out
scipy's own submodules."""

from __future__ import annotations

import re
from pathlib import Path

import scipy.optimize
import scipy.special
import scipy.stats

from kit.stats import lazy

KIT = Path(__file__).resolve().parents[2] / "kit"


def test_no_module_of_kit_imports_scipy_but_the_helper() -> None:
    pattern = re.compile(r"^\s*(from scipy\b|import scipy\b)", re.M)
    offenders = [str(p.relative_to(KIT)) for p in KIT.rglob("*.py")
                 if p.name != "lazy.py" and pattern.search(p.read_text())]
    assert offenders == []


def test_the_helper_gives_scipys_own_modules() -> None:
    assert lazy.stats() is scipy.stats and lazy.special() is scipy.special and lazy.optimize() is scipy.optimize
    assert lazy.special().ndtr(0.0) == 0.5
