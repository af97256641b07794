"""scipy, imported on first use: every `python -m kit` start imports kit.stats (through kit.plan, kit.reproduce), and
importing scipy costs ~0.4 s of CPU that a start which computes nothing must not pay. The one place kit's modules
get scipy's submodules from (``stats()``, ``special()``, ``optimize()``), each imported once."""

from __future__ import annotations

import functools
import importlib
from types import ModuleType


@functools.cache
def _module(name: str) -> ModuleType:
    return importlib.import_module(f"scipy.{name}")


def stats() -> ModuleType:
    """scipy.stats (distributions, tests)."""
    return _module("stats")


def special() -> ModuleType:
    """scipy.special (ufuncs: ndtr, ndtri, stdtr, stdtrit, roots_jacobi)."""
    return _module("special")


def optimize() -> ModuleType:
    """scipy.optimize (brentq)."""
    return _module("optimize")
