"""Number hygiene and formatting: significant-digit rounding, JSON-safe copies, verdict percentages."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from kit.stats.metrics import SIG_DIGITS


def round_sig(x: float, digits: int = SIG_DIGITS) -> float | None:
    """``x`` rounded to ``digits`` significant digits (None for NaN/inf; never -0.0)."""
    if not math.isfinite(x):
        return None
    r = float(f"{x:.{digits}g}")
    return 0.0 if r == 0 else r


def clean(obj: object) -> object:
    """JSON-safe copy: floats rounded to SIG_DIGITS significant digits, NaN/inf -> None, numpy -> Python."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return round_sig(float(obj))
    if isinstance(obj, Mapping):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [clean(v) for v in obj.tolist()]
    raise TypeError(f"cannot put {type(obj).__name__} in a summary")


def pct_text(x: float) -> str:
    """A percentage with one decimal; beyond +/-1000 % only the bound is meaningful (few repeats)."""
    if math.isfinite(x) and abs(x) >= 1000:
        return "≥1000" if x > 0 else "≤−1000"
    return f"{x:.1f}".replace("-", "−")
