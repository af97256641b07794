"""What a finished run could have detected: per primary comparison, the effect its design detects with 80 % power
at the variation it observed (between cells for Welch, within blocks for the blocked test), and what a 'no
significant difference' interval rules out.

The observed variation is read back from the comparison's own symmetric log interval (its standard error over
sqrt(1/K_a + 1/K_b): with equal cell counts exactly the pooled within-arm SD of the log cell statistics), so
nothing is recomputed from records and summary.json is unchanged. The maths: ``kit.stats.power``; the method:
docs/statistics.md, "Power and the detectable effect".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kit.files.summary import Analysis, Comparison, Summary
from kit.stats import power


@dataclass(frozen=True)
class Detectable:
    log_sd: float  # observed SD of the log cell statistics: between cells (Welch), within blocks (blocked)
    mde: float | None  # |log ratio| detected with TARGET_POWER at the family's first step
    blocked: bool = False  # the comparison's test: the blocked (paired) t, its SD the within-block one


def detectable(c: Comparison, a: Analysis) -> Detectable | None:
    """The observed CV and detectable effect of one tested comparison (None: no interval to read it from)."""
    ci = c.ratio_ci
    if not c.tested or ci is None or ci[0] is None or ci[1] is None or c.df is None or c.interval_confidence is None:
        return None
    sd = power.sd_from_interval([ci[0], ci[1]], c.df, c.interval_confidence, c.cells.arm, c.cells.baseline)
    if sd is None or not math.isfinite(sd) or sd <= 0:
        return None
    tail = (1 - a.confidence) / max(a.family_size, 1)
    if c.method == "blocked_log_cells":  # the residual df the comparison had (blocks with both arms)
        return Detectable(sd, power.mde(sd, c.cells.arm, c.cells.baseline, tail, method="blocked", df=round(c.df)),
                          blocked=True)
    return Detectable(sd, power.mde(sd, c.cells.arm, c.cells.baseline, tail))


def _pct(x: float) -> str:
    return f"{x:+.1f}".replace("-", "−")


def rules_out_text(c: Comparison, *, level: bool = True) -> str | None:
    """For a 'no significant difference': the changes its interval rules out (None otherwise)."""
    ci = c.change_pct_ci
    if c.status != "not_significant" or ci is None or ci[0] is None or ci[1] is None:
        return None
    at = f" ({100 * c.interval_confidence:.4g} % interval)" if level and c.interval_confidence is not None else ""
    return f"the interval rules out only changes beyond {_pct(ci[0])} % and {_pct(ci[1])} %{at}"


def detect_text(d: Detectable) -> str:
    where = "within-block" if d.blocked else "between-cell"
    cv = f"observed {where} CV {100 * power.cv_from_sd(d.log_sd):.1f} %"
    if d.mde is None:
        return f"this design could detect no effect at {100 * power.TARGET_POWER:.0f} % power ({cv})"
    return (f"this design could detect {_pct(power.percent_up(d.mde))} % / {_pct(-power.percent_down(d.mde))} % at "
            f"{100 * power.TARGET_POWER:.0f} % power ({cv})")


def power_note(c: Comparison, a: Analysis) -> str | None:
    """One line for a primary comparison: what it could detect and, when not significant, what it rules out."""
    if c.role != "primary" or not c.tested:
        return None
    d = detectable(c, a)
    parts = [] if d is None else [detect_text(d)]
    ruled = rules_out_text(c)
    if ruled:
        parts.append(ruled)
    return "; ".join(parts) or None


def power_section(summary: Summary) -> list[str]:
    """``report.md``'s section on what the design could detect, one bullet per primary comparison."""
    a = summary.analysis
    rows = [c for c in summary.comparisons if c.role == "primary" and c.tested]
    if not rows:
        return []
    tail = (1 - a.confidence) / max(a.family_size, 1)
    step = "Holm's first step" if a.correction == "holm" else "Bonferroni"
    blocked = a.comparison_method == "blocked"
    test = "the blocked (paired) t" if blocked else "Welch's t"
    sd = ("the within-block variation this run observed (the SD of the log cell statistics once each block's level "
          "is removed" if blocked else
          "the between-cell variation this run observed (the SD of the log cell statistics")
    out = ["## What this design could detect", "",
           f"Primary metric {a.primary}, {100 * power.TARGET_POWER:.0f} % power, {test} two-sided at "
           f"α/m = {1 - a.confidence:.3g}/{a.family_size} = {tail:.3g} ({step}), at {sd}, read back from each "
           "comparison's interval). Method: "
           "docs/statistics.md, \"Power and the detectable effect\"; before a run: `kit plan --pilot BUNDLE`.", ""]
    for c in rows:
        head = f"- c={c.level}, {c.arm} vs {c.baseline} ({c.cells.arm} vs {c.cells.baseline} cells): "
        d = detectable(c, a)
        if d is None:
            out.append(head + "no interval, nothing to read the variation from (" + c.status.replace("_", " ") + ")")
            continue
        ruled = rules_out_text(c)
        tail_text = (f"; no significant difference, which is not 'no effect': {ruled}" if ruled else
                     "" if c.status in ("significant", "not_significant") else
                     f"; no verdict here ({c.status.replace('_', ' ')})")
        out.append(head + detect_text(d) + tail_text)
    return [*out, ""]
