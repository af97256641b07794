"""One interim look of a sequential design (``design.sequential``) from the primary comparisons of the cells so
far and the looks before it: which comparisons are decided (efficacy: the sequential Holm of
``kit.stats.sequential`` rejects; futility: the interval lies inside the pre-registered margin), and whether the
run stops. Pure: ``kit.stats.bundle`` reads the cells, ``kit.experiment.looks`` writes ``looks/<k>.json``, and
``kit verify`` recomputes every look from the records. The method: docs/statistics.md, "Sequential designs".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kit.manifest import Manifest
from kit.stats.ab import LevelSamples, bounded, compare_levels, metric_by_key, run_test
from kit.stats.model import Welch
from kit.stats.numbers import clean
from kit.stats.sequential import Hypothesis, holm_sequential
from kit.stats.summary import analysis_rule
from kit.stats.verdict import WITHHELD, verdict_text

LOOKS_DIR = "looks"
LookDoc = dict[str, Any]  # what looks/<k>.json holds (typed: kit.files.looks.LookFile)


def look_rel(k: int, directory: str = LOOKS_DIR) -> str:
    return f"{directory}/{k:03d}.json"


def blocks(m: Manifest) -> int:
    """The most looks a sequential run makes: one per block of two repeats per arm."""
    return m.design.repeats // 2


@dataclass(frozen=True)
class LookInput:
    """What a look is taken on (recorded, and the only thing ``kit verify`` takes from the file): its number, the
    ok cells it uses and the seconds the run's cells have taken so far."""

    look: int
    cells: tuple[str, ...]
    elapsed_s: float


def final_reason(m: Manifest, look: int, elapsed_s: float) -> str | None:
    """Why this look is the last there can be: the maximum repeats, or a time budget that another block (at
    the mean block time so far) would pass; None: more may follow."""
    seq = m.design.sequential
    if look >= blocks(m):
        return "max_repeats"
    if seq is not None and seq.max_minutes is not None and elapsed_s + elapsed_s / look > seq.max_minutes * 60:
        return "time_budget"
    return None


def _result(ls: LevelSamples, arm: str, baseline: str, m: Manifest) -> Welch | None:
    """The pre-registered comparison the looks test (``analysis.method`` and ``analysis.statistic``, as
    ``compare_levels`` runs it) of arm against baseline on the log cell statistics."""
    rule, method = analysis_rule(m)
    return run_test(ls.arms.get(arm, []), ls.arms.get(baseline, []), metric_by_key(m.analysis.primary), rule, method)


def _futility_ci(ls: LevelSamples, arm: str, baseline: str, m: Manifest) -> list[float] | None:
    """The futility interval of the ratio arm/baseline in percent: the pre-registered comparison at the futility
    confidence."""
    seq = m.design.sequential
    if seq is None or seq.futility is None:
        return None
    r = _result(ls, arm, baseline, m)
    if r is None:
        return None
    lo, hi = r.interval(1 - seq.futility.confidence)
    if not bounded(lo, hi):
        return None
    return [100 * (math.exp(lo) - 1), 100 * (math.exp(hi) - 1)]


def repeated_ci(r: Welch | None, nominal: float) -> list[float] | None:
    """The repeated confidence interval of the ratio at a look (Jennison & Turnbull 2000, ch. 9): the estimate
    +- t(1 - nominal/2, df) se, ``nominal`` the look's boundary as a two-sided level (the boundaries of
    ``kit.stats.sequential`` at the comparison's family level). It excludes 1 exactly when the look's test crosses
    its boundary, and the intervals of every look cover the true ratio together with probability 1 - the family
    level (the boundaries' crossing probability under any true ratio). None: the look cannot bound it (its
    boundary is infinite, or so far out on few df that no ratio is excluded: beyond e^+-700) or there is no test."""
    if r is None or not nominal > 0:
        return None
    lo, hi = r.interval(nominal)
    if not bounded(lo, hi):
        return None
    return [math.exp(lo), math.exp(hi)]


def _inside(ci: list[float] | None, margin_pct: float) -> bool:
    if ci is None:
        return False
    return 100 * (1 / (1 + margin_pct / 100) - 1) < ci[0] and ci[1] < margin_pct


def take_look(m: Manifest, levels: Sequence[LevelSamples], inp: LookInput, history: Sequence[LookDoc]) -> LookDoc:
    """The look ``inp`` on the level samples of its cells, after the looks ``history`` (1..k-1, as recorded or
    recomputed): each primary comparison's fraction, p, nominal level and decision, and whether to stop."""
    seq = m.design.sequential
    assert seq is not None, "a look needs design.sequential"
    arms = [a.name for a in m.arms]
    base = m.baseline_arm
    alpha = 1 - m.analysis.confidence
    rule, method = analysis_rule(m)  # the pre-registered test and cell statistic, as the summary uses them
    comps, _, _ = compare_levels(levels, arms, base, primary=m.analysis.primary,
                                 correction=m.analysis.correction, confidence=m.analysis.confidence,
                                 rule=rule, method=method)
    primary = [c for c in comps if c["role"] == "primary"]
    most = 2 * m.design.repeats
    final = final_reason(m, inp.look, inp.elapsed_s)
    fractions = [min((c["cells"]["arm"] + c["cells"]["baseline"]) / most, 1.0) for c in primary]
    pvalues = [1.0 if c["status"] in WITHHELD or c["p_value"] is None else float(c["p_value"]) for c in primary]
    hyps = []
    for i, c in enumerate(primary):
        before = [next(x for x in h["comparisons"] if x["arm"] == c["arm"] and x["level"] == c["level"])
                  for h in history]
        hyps.append(Hypothesis(tuple([float(x["fraction"]) for x in before] + [fractions[i]]),
                               tuple([float(x["p_test"]) for x in before] + [pvalues[i]])))
    alpha_hyps = hyps
    if m.analysis.correction == "bonferroni":  # no alpha passes between hypotheses
        decisions = [holm_sequential([h], alpha / max(len(hyps), 1), seq.spending, final=final is not None)[0]
                     for h in alpha_hyps]
    else:
        decisions = holm_sequential(alpha_hyps, alpha, seq.spending, final=final is not None)
    by_level = {ls.level: ls for ls in levels}
    out = []
    for c, fr, p, d in zip(primary, fractions, pvalues, decisions, strict=True):
        ls = by_level.get(c["level"])
        ci = None if ls is None else _futility_ci(ls, c["arm"], base, m)
        rci = None if ls is None else repeated_ci(_result(ls, c["arm"], base, m), d.nominal)
        if d.rejected_at is not None:
            decision = "efficacy"
        elif c["status"] in WITHHELD:
            decision = "withheld"
        elif seq.futility is not None and _inside(ci, seq.futility.margin_pct):
            decision = "futility"
        else:
            decision = "continue"
        out.append({"arm": c["arm"], "level": c["level"], "cells": c["cells"], "fraction": fr,
                    "p_value": c["p_value"], "p_test": p, "status": c["status"], "change_pct": c["change_pct"],
                    "family_alpha": d.level, "nominal_p": d.nominal,
                    "rejected_at_look": None if d.rejected_at is None else d.rejected_at + 1,
                    "futility_ci_pct": ci, "repeated_ci": rci, "repeated_confidence": 1 - d.level,
                    "decision": decision})
    decided = bool(out) and all(c["decision"] in ("efficacy", "futility") for c in out)
    doc = {"look": inp.look, "of": blocks(m), "cells": list(inp.cells), "elapsed_s": inp.elapsed_s,
           "spending": seq.spending, "alpha": alpha, "correction": m.analysis.correction,
           "most_cells_per_comparison": most, "final": final, "comparisons": out, "decided": decided,
           "stop": "decided" if decided else final}
    cleaned = clean(doc)
    assert isinstance(cleaned, dict)
    return cleaned


def _stopped_text(last: LookDoc | None) -> str:
    if last is None:
        return "no look yet (the run ended before its first block)"
    stop = last.get("stop")
    k = last["look"]
    if stop == "decided":
        return f"decided at look {k} of {last['of']}: every primary comparison is decided"
    if stop == "max_repeats":
        return f"max repeats: look {k} of {last['of']} was the last block the design allows"
    if stop == "time_budget":
        return f"budget spent: another block would pass design.sequential.max_minutes (look {k} of {last['of']})"
    return f"not finished: look {k} of {last['of']} decided nothing final (the run was stopped before its end)"


def apply_looks(m: Manifest, doc: Any, looks: Sequence[LookDoc]) -> Any:
    """The summary of a sequential run: its primary verdicts are those of the last look (significant only where
    the sequential Holm rejected), the cells a decided run never needed are not counted as failed, and a
    ``sequential`` section says why it stopped."""
    last = looks[-1] if looks else None
    decisions = {(c["arm"], c["level"]): c for c in last["comparisons"]} if last else {}
    metric = metric_by_key(m.analysis.primary)
    for c in doc["comparisons"]:
        d = decisions.get((c["arm"], c["level"]))
        if c["role"] != "primary" or d is None:
            continue
        if c["status"] not in WITHHELD:
            c["significant"] = d["decision"] == "efficacy"
            c["status"] = "significant" if c["significant"] else "not_significant"
        _repeated_interval(c, d)
        c["verdict"] = verdict_text(c["arm"], metric, c["status"], c["ratio"] or math.nan, c["ratio_ci"],
                                    math.nan if c["diff"] is None else c["diff"], c["diff_ci"], c["errors"],
                                    c.get("lengths"), c.get("usage")) + _decision_tail(d, m)
    used = set(last["cells"]) if last else set()
    stopped = last is not None and last.get("stop") is not None
    not_run = mark_not_run(doc, 2 * int(last["look"]), f"the sequential design stopped at look {last['look']}") \
        if stopped and last is not None else []
    doc["sequential"] = clean({
        "spending": m.design.sequential.spending if m.design.sequential else None,
        "looks": len(looks), "most_looks": blocks(m), "stop": last.get("stop") if last else None,
        "stopped": _stopped_text(last), "cells_used": len(used), "cells_planned": len(doc["cells"]),
        "cells_not_run": len(not_run),
        "comparisons": [{k: c.get(k) for k in ("arm", "level", "decision", "p_value", "nominal_p", "fraction",
                                               "rejected_at_look", "repeated_ci", "repeated_confidence")}
                        for c in (last["comparisons"] if last else [])]})
    return doc


def mark_not_run(doc: Any, block_end: int, reason: str) -> list[str]:
    """The cells a run stopped by its looks never needed (never ran, of a repeat after ``block_end``) become
    ``not_run`` with ``reason``, not failed cells; returns their ids."""
    not_run = [c["id"] for c in doc["cells"] if c["status"] == "missing" and c["repeat"] > block_end]
    doc["failed_cells"] = [f for f in doc["failed_cells"] if f["id"] not in not_run]
    for c in doc["cells"]:
        if c["id"] in not_run:
            c["status"], c["reason"] = "not_run", reason
    return not_run


def _repeated_interval(c: Any, d: LookDoc) -> None:
    """A primary comparison's interval becomes the last look's repeated confidence interval (its marginal level in
    ``interval_confidence``; the absolute difference's interval scaled with it); None where the look cannot bound
    it. The fixed-sample interval at a look the data chose covers less than it says."""
    rci, old = d.get("repeated_ci"), c.get("ratio_ci")
    nominal = d.get("nominal_p")
    base = None  # the baseline's geometric-mean cell value: diff_ci = base x (ratio_ci - 1)
    if old and c.get("diff_ci") and old[1] > old[0]:
        base = (c["diff_ci"][1] - c["diff_ci"][0]) / (old[1] - old[0])
    c["ratio_ci"] = rci
    c["change_pct_ci"] = None if rci is None else [100 * (x - 1) for x in rci]
    c["diff_ci"] = None if rci is None or base is None else [base * (x - 1) for x in rci]
    c["interval_confidence"] = None if rci is None or nominal is None else 1 - nominal


def _decision_tail(d: LookDoc, m: Manifest) -> str:
    if d.get("repeated_ci") is not None:
        note = f"; the interval is the repeated {100 * d['repeated_confidence']:.4g} % CI over the looks"
    else:
        note = "; no interval: this look cannot bound it"
    return _decision_text(d, m) + note + ")"


def _decision_text(d: LookDoc, m: Manifest) -> str:
    seq = m.design.sequential
    if d["decision"] == "efficacy":
        return f" (sequential: rejected at look {d['rejected_at_look']}"
    if d["decision"] == "futility" and seq is not None and seq.futility is not None:
        return f" (sequential: futility, no change as large as ±{seq.futility.margin_pct:g} %"
    if d["decision"] == "withheld" or d.get("p_value") is None or d.get("nominal_p") is None:
        return " (sequential: withheld"  # the status says why there is no verdict; no boundary was tested
    return f" (sequential: p={d['p_value']:.3g} above its boundary {d['nominal_p']:.3g}"
