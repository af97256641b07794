"""Number formatting for the report's tables and lines."""

from __future__ import annotations

from collections.abc import Sequence

from kit.files.summary import Summary


def fmt(x: float | None, unit: str = "") -> str:
    """A figure with as many decimals as its size deserves ('–' when missing; ints as they are)."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x}{unit}"
    v = float(x)
    a = abs(v)
    text = f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 1 else f"{v:.3g}"
    return text.replace("-", "−") + unit


def ratio_text(x: float | None) -> str:
    if x is None:
        return "–"
    return "≥1000" if x >= 1000 else f"{x:.3g}" if x >= 10 else f"{x:.3f}"


def ratio_ci_text(ci: Sequence[float | None] | None) -> str:
    return "(not tested)" if not ci else f"[{ratio_text(ci[0])}, {ratio_text(ci[1])}]"


def adjusted_pct(summary: Summary) -> str:
    return f"{100 * summary.analysis.adjusted_confidence:.4g} %"


def confidence_pct(summary: Summary) -> str:
    return f"{100 * summary.analysis.confidence:.0f} %"
