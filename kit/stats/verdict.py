"""The words of an A/B comparison: its status and its one-line verdict (one phrasing for every metric).

Changes are always signed as arm minus baseline, as a percentage, a ratio and an absolute difference, e.g.
"oea faster: TPOT mean −23.4 % (×0.766) [−30.1, −16.2], −4.1 ms [−6.0, −2.2]"; 'faster' means lower latency or
higher throughput. See docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from kit.stats.metrics import Metric
from kit.stats.numbers import pct_text
from kit.stats.shapes import ErrorCounts, LengthCounts, UsageCounts

WITHHELD = {
    "too_few_cells": "too few cells: no verdict",
    "usage_flagged": ("the server's token counts are implausible (usage counts, or more content events than the tokens "
                      "asked) or contradict the client's count: no verdict"),
    "error_rate_differs": "error rates differ: no verdict",
    "output_lengths_differ": "the arms returned fewer output tokens than asked at different rates: no verdict",
    "client_bound": "client-bound: no verdict",
    "ttft_client_bound": "the client's own share of TTFT p99 is too large: no TTFT verdict",
}


def comparison_status(withheld: str | None, significant: bool) -> str:
    if withheld:
        return withheld
    return "significant" if significant else "not_significant"


def _signed(x: float, digits: int = 1) -> str:
    text = pct_text(x) if digits == 1 else f"{abs(x):.{digits}g}"
    return ("+" if x >= 0 else "−") + text.lstrip("-−")


def _num(x: float) -> str:
    a = abs(x)
    text = f"{a:.0f}" if a >= 100 else f"{a:.1f}" if a >= 10 else f"{a:.2f}" if a >= 0.1 else f"{a:.3g}"
    return ("−" if x < 0 else "+") + text


def change_text(metric: Metric, ratio: float, ci: Sequence[float] | None, diff: float,
                diff_ci: Sequence[float] | None) -> str:
    unit = f" {metric.unit}" if metric.unit else ""
    if math.isnan(ratio) or math.isnan(diff):  # an arm has no ok cell at this level
        return f"{metric.label}: no value in one arm"
    pct = f"{metric.label} {_signed(100 * (ratio - 1))} % (×{ratio:.3g})"
    if ci is not None:
        pct += f" [{_signed(100 * (ci[0] - 1))}, {_signed(100 * (ci[1] - 1))}]"
    text = f"{pct}, {_num(diff)}{unit}"
    if diff_ci is not None:
        text += f" [{_num(diff_ci[0])}, {_num(diff_ci[1])}]"
    return text


def errors_text(e: ErrorCounts) -> str:
    text = f"failed {e['arm_failed']}/{e['arm_requests']} vs {e['baseline_failed']}/{e['baseline_requests']}"
    return text + (f" (Fisher p={e['p']:.2g})" if e["p"] is not None else "")


def lengths_text(n: LengthCounts) -> str:
    """'; short 3/96 vs 0/96 (Fisher p=0.25)' when any ok response had fewer output tokens than asked, else ''."""
    if not n["arm_short"] and not n["baseline_short"]:
        return ""
    text = f"; short {n['arm_short']}/{n['arm_ok']} vs {n['baseline_short']}/{n['baseline_ok']}"
    return text + (f" (Fisher p={n['p']:.2g})" if n["p"] is not None else "")


def usage_text(u: UsageCounts) -> str:
    """'; usage flagged 12/12 vs 0/12' when any ok response's usage count is not believed, else ''."""
    if not u["arm_flagged"] and not u["baseline_flagged"]:
        return ""
    return f"; usage flagged {u['arm_flagged']}/{u['arm_ok']} vs {u['baseline_flagged']}/{u['baseline_ok']}"


def verdict_text(arm: str, metric: Metric, status: str, ratio: float, ci: Sequence[float] | None, diff: float,
                 diff_ci: Sequence[float] | None, errors: ErrorCounts, lengths: LengthCounts | None = None,
                 usage: UsageCounts | None = None) -> str:
    """'<arm> faster: <change>' / '<arm> slower: ...' / 'no significant difference: ...' / '<withheld>: ...'."""
    change = change_text(metric, ratio, ci, diff, diff_ci)
    if status in WITHHELD:
        head = WITHHELD[status]
    elif status == "significant":
        better = (ratio > 1) == metric.higher_is_better
        head = f"{arm} {'faster' if better else 'slower'}"
    else:
        head = "no significant difference"
    tail = ('' if lengths is None else lengths_text(lengths)) + ('' if usage is None else usage_text(usage))
    return f"{head}: {change}; {errors_text(errors)}{tail}"


def descriptive_text(ratio: float) -> str:
    return f"descriptive, not tested: {'+' if ratio >= 1 else ''}{pct_text(100 * (ratio - 1))} %"
