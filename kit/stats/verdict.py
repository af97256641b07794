"""The words of an A/B comparison: its status and its one-line verdict."""

from __future__ import annotations

from collections.abc import Sequence

from kit.stats.metrics import Metric
from kit.stats.numbers import pct_text


def comparison_status(client_bound: bool, significant: bool) -> str:
    if client_bound:
        return "client_bound"
    return "significant" if significant else "not_significant"


def verdict_text(arm: str, metric: Metric, ratio: float, ci: Sequence[float], *, client_bound: bool,
                 single_cell_arms: Sequence[str] = ()) -> str:
    """'<arm> faster by 12.3 % [9.1, 15.2]' / 'slower by' / 'no significant difference (−1.2 % [−4.0, 1.9])'.

    Percentages are changes of the metric itself relative to the baseline; 'faster' means lower latency or
    higher throughput, and the interval is then given in the same direction as the number.
    """
    change, lo, hi = 100 * (ratio - 1), 100 * (ci[0] - 1), 100 * (ci[1] - 1)
    measured = f"{'+' if change >= 0 else ''}{pct_text(change)} % [{pct_text(lo)}, {pct_text(hi)}]"
    if client_bound:
        text = f"client-bound: not a clean result (measured {measured})"
    elif ci[0] <= 1 <= ci[1]:
        text = f"no significant difference ({measured})"
    else:
        up = ci[0] > 1
        better = up == metric.higher_is_better
        word = "faster" if better else "slower"
        if up:
            text = f"{arm} {word} by {pct_text(change)} % [{pct_text(lo)}, {pct_text(hi)}]"
        else:
            text = f"{arm} {word} by {pct_text(-change)} % [{pct_text(-hi)}, {pct_text(-lo)}]"
    if single_cell_arms:
        text += (f"; repeats could not be resampled (one ok cell for {', '.join(single_cell_arms)}): "
                 "the interval covers request-to-request noise only")
    return text


def descriptive_text(ratio: float) -> str:
    return f"descriptive, not tested: {'+' if ratio >= 1 else ''}{pct_text(100 * (ratio - 1))} %"
