"""The reproduction verdict from two summaries: per level, each A/B effect across the two runs (kit.reproduce.decide:
inconsistent, reproduced or imprecise), each arm's shift between the runs (a fact about the machines, judged only
with analysis.reproduce.same_hardware), and whether the A/B conclusion held.

Pure: it reads typed ``Summary`` objects (each bundle's summary.json, which `kit verify` recomputes from the records)
and computes, under the original's pre-registered analysis: its analysis.statistic (the cells' ``cell_values``,
summary schema 5: the numbers its A/B test compared; before schema 5, the cell means every analysis then used) and
its analysis.method (Welch on the cells, or blocked within ABBA blocks) for both runs' effects. The method:
docs/reproduce.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kit.errors import UsageError
from kit.files.reproduce import CellCounts, Conclusion, Interval, ReproComparison, Verdict
from kit.files.summary import CellLevel, Comparison, Summary
from kit.reproduce.decide import EffectCells, Rule, decide, effect_contrasts
from kit.reproduce.equivalence import MAX_REPEATS, Contrast, contrast, holm_adjusted, interval, logs, p_zero
from kit.stats.ab import block_of_repeat
from kit.stats.model import fisher_p
from kit.stats.numbers import pct_text

FIGURE: dict[str, Callable[[CellLevel], float | None]] = {
    "tpot_mean_ms": lambda f: f.tpot_ms.mean,
    "ttft_mean_ms": lambda f: f.ttft_ms.mean,
    "itl_mean_ms": lambda f: f.itl_ms.mean,
    "e2e_mean_ms": lambda f: f.e2e_ms.mean,
    "throughput_tok_s": lambda f: f.throughput_tok_s,
}
LABEL = {"tpot_mean_ms": "TPOT mean", "ttft_mean_ms": "TTFT mean", "itl_mean_ms": "ITL mean",
         "e2e_mean_ms": "E2E mean", "throughput_tok_s": "throughput"}
UNIT = {"throughput_tok_s": " tok/s"}
AB_WITHHELD = ("error_rate_differs", "output_lengths_differ", "usage_flagged")  # an A/B status: no effect to reproduce
WITHHELD = {
    "too_few_cells": "fewer than 2 ok cells in a run: no verdict",
    "client_bound": "client-bound: no verdict",
    "ttft_client_bound": "the client's own share of TTFT p99 is too large: no TTFT verdict",
    "error_rate_differs": "failure rates differ between the runs",
    "ab_withheld": "the A/B verdict itself is withheld for failure rates, output lengths or usage counts",
    "output_lengths_differ": "the runs returned fewer output tokens than asked at different rates: no verdict",
}


@dataclass(frozen=True)
class ArmCells:
    """One arm at one level of one run: its included cells' statistics and what guards the verdict."""

    values: list[float | None]
    client_bound: bool
    ttft_client_bound: bool
    failed: int
    requests: int
    short: int = 0  # ok requests with fewer output tokens than asked (summary schema 3; 0 before)
    ok: int = 0
    repeats: tuple[int, ...] = ()  # each value's cell's repeat (its ABBA block for the blocked analysis)

    def blocks(self) -> list[int]:
        return [block_of_repeat(r) for r in self.repeats]


def arm_cells(s: Summary, arm: str, level: int, metric: str) -> ArmCells:
    """The included cells with records at ``level`` (cells without an ok request give no statistic, as in kit's
    A/B); client-bound and failures over every included cell with records there."""
    get = FIGURE.get(metric, _no_figure)
    values: list[float | None] = []
    repeats: list[int] = []
    bound = ttft_bound = False
    failed = requests = short = ok = 0
    for cell in s.cells:
        f = cell.levels.get(str(level))
        if cell.arm != arm or not cell.included or f is None:
            continue
        if f.ok > 0:
            values.append(f.cell_values.get(metric) if f.cell_values is not None else get(f))
            repeats.append(cell.repeat)
        bound = bound or f.client_bound
        ttft_bound = ttft_bound or f.ttft_client_bound or f.client_bound
        failed += f.errors
        requests += f.requests
        short += f.short_responses
        ok += f.ok
    return ArmCells(values, bound, ttft_bound, failed, requests, short, ok, tuple(repeats))


def _no_figure(f: CellLevel) -> float | None:
    return None  # goodput and SLO attainment: only in schema 5's cell_values


def _count(values: list[float | None]) -> int:
    return int(np.isfinite(logs(values)).sum())


def _gm(values: list[float | None]) -> float | None:
    y = logs(values)
    y = y[np.isfinite(y)]
    return math.exp(float(y.mean())) if y.size else None


@dataclass(frozen=True)
class Judge:
    """What every comparison of one reproduction shares."""

    original: Summary
    new: Summary
    rule: Rule
    same_hardware: bool = False  # the arms' shifts count in the verdict
    # Holm-adjusted p-values of the family of tests that can each say "inconsistent", by (test, arm, level): every
    # effect's test of no difference; with same_hardware also every arm's ("arm") and its failure rate ("fisher")
    adjusted: dict[tuple[str, str, int], float] = field(default_factory=dict)

    @property
    def metric(self) -> str:
        return self.original.analysis.primary

    @property
    def baseline(self) -> str:
        return self.original.baseline

    @property
    def alpha(self) -> float:
        return self.rule.alpha

    @property
    def blocked(self) -> bool:
        """The original pre-registered the blocked analysis: both runs' effects are blocked estimates."""
        return self.original.analysis.comparison_method == "blocked"

    def cells(self, run: Summary, arm: str, level: int) -> ArmCells:
        return arm_cells(run, arm, level, self.metric)

    def p(self, key: tuple[str, str, int], raw: float) -> float:
        return self.adjusted.get(key, raw)

    def decide(self, c: Contrast | None, withheld: str | None, key: tuple[str, str, int], claimed: float | None,
               judged: bool) -> tuple[str, Verdict | None, dict[str, object]]:
        """status, verdict (None: not judged) and the numbers of one comparison (shown even when withheld)."""
        nums: dict[str, object] = {"ratio": None, "ratio_ci": None, "log_estimate": None, "log_se": None,
                                   "df": None, "p_equivalent": None, "p_zero": None, "p_zero_adjusted": None,
                                   "repeats_needed": None, "margin": self.rule.absolute_margin,
                                   "margin_basis": "effect" if claimed is not None else "absolute"}
        if c is None:
            return "too_few_cells", "imprecise" if judged else None, {**nums, "repeats_needed": 2}
        d = decide(c, claimed, self.p(key, p_zero(c)), self.rule)
        low, high = (d.low, d.high) if judged else interval(c, 1 - self.alpha)
        nums.update(ratio=math.exp(d.estimate), ratio_ci=Interval(low=math.exp(low), high=math.exp(high)),
                    log_estimate=d.estimate, log_se=d.se, df=d.df, p_equivalent=d.p_equivalent, p_zero=d.p_zero,
                    p_zero_adjusted=d.p_zero_adjusted, margin=math.expm1(d.delta), direction_held=d.direction_held)
        if withheld is not None:
            if not judged:
                return withheld, None, nums
            return withheld, "inconsistent" if withheld == "error_rate_differs" else "imprecise", nums
        if not judged:
            return "shift", None, nums
        nums["repeats_needed"] = d.repeats_needed
        return d.verdict, d.verdict, nums

    def guard(self, groups: list[ArmCells]) -> str | None:
        """groups: (original, new) of one arm, or of both arms of an effect in the order of ``effect``."""
        if any(g.client_bound for g in groups):
            return "client_bound"
        if self.metric == "ttft_mean_ms" and any(g.ttft_client_bound for g in groups):
            return "ttft_client_bound"
        half = len(groups) // 2
        for o, n in zip(groups[:half], groups[half:], strict=True):  # each arm's short rate, original against new
            p = fisher_p(n.short, n.ok, o.short, o.ok)
            if p is not None and p < self.alpha:
                return "output_lengths_differ"
        return None

    def arm(self, arm: str, level: int) -> ReproComparison:
        o, n = self.cells(self.original, arm, level), self.cells(self.new, arm, level)
        c = contrast(logs(n.values), logs(o.values))
        withheld = None
        p_fail = self.fisher(arm, level)
        if c is not None and p_fail is not None and self.p(("fisher", arm, level), p_fail) < self.alpha:
            withheld = "error_rate_differs"
        elif c is not None:
            withheld = self.guard([o, n])
        status, verdict, nums = self.decide(c, withheld, ("arm", arm, level), None, self.same_hardware)
        reason = WITHHELD.get(status, "")
        if status == "error_rate_differs":
            assert p_fail is not None
            reason = (f"failed {o.failed}/{o.requests} originally, {n.failed}/{n.requests} now (Fisher p={p_fail:.2g}"
                      f", Holm-adjusted {self.p(('fisher', arm, level), p_fail):.2g})")
        comp = ReproComparison.model_validate({
            "kind": "arm", "arm": arm, "level": level, "metric": self.metric, "original": _gm(o.values),
            "new": _gm(n.values), "interval_confidence": 1 - (2 if self.same_hardware else 1) * self.alpha,
            "cells": CellCounts(original=_count(o.values), new=_count(n.values)), "status": status,
            "verdict": verdict, "reason": reason, "text": "", "judged": self.same_hardware, **nums})
        return comp.model_copy(update={"text": comparison_text(comp, self.repeats_now(o, n))})

    def effect(self, arm: str, level: int) -> ReproComparison:
        base = self.baseline
        groups = {(run_name, a): self.cells(run, a, level)
                  for run_name, run in (("original", self.original), ("new", self.new)) for a in (arm, base)}
        oa, ob, na, nb = (logs(groups[r, a].values) for r in ("original", "new") for a in (arm, base))
        ob_, nb_ = ((groups[r, arm].blocks(), groups[r, base].blocks()) if self.blocked else None
                    for r in ("original", "new"))
        parts = effect_contrasts(EffectCells(oa, ob, na, nb, False, ob_, nb_))
        co, cn = (parts[0], parts[1]) if parts else (contrast(oa, ob, ob_), None)
        ab = [_primary(run, arm, level, self.metric) for run in (self.original, self.new)]
        claimed = co.estimate if co is not None and ab[0] is not None and ab[0].status == "significant" else None
        withheld = None
        if parts is not None:
            withheld = "ab_withheld" if any(x is not None and x.status in AB_WITHHELD for x in ab) \
                else self.guard(list(groups.values()))
        status, verdict, nums = self.decide(parts[2] if parts else None, withheld, ("effect", arm, level), claimed,
                                            True)
        comp = ReproComparison.model_validate({
            "kind": "effect", "arm": arm, "baseline": base, "level": level, "metric": self.metric,
            "original": math.exp(co.estimate) if co else None, "new": math.exp(cn.estimate) if cn else None,
            "interval_confidence": 1 - 2 * self.alpha,
            "cells": CellCounts(original=min(_count(groups["original", a].values) for a in (arm, base)),
                                new=min(_count(groups["new", a].values) for a in (arm, base))),
            "status": status, "verdict": verdict, "reason": WITHHELD.get(status, ""), "text": "", **nums})
        return comp.model_copy(update={"text": comparison_text(comp, self.repeats_now(*groups.values()),
                                                               self.rule.effect_margin)})

    def fisher(self, arm: str, level: int) -> float | None:
        """Fisher's exact p of the arm's failed/all requests at the level, original against new (None: no failure)."""
        o, n = self.cells(self.original, arm, level), self.cells(self.new, arm, level)
        return fisher_p(n.failed, n.requests, o.failed, o.requests)

    @staticmethod
    def repeats_now(*groups: ArmCells) -> int:
        return min(len(g.values) for g in groups)


def _primary(s: Summary, arm: str, level: int, metric: str) -> Comparison | None:
    return next((c for c in s.comparisons if c.arm == arm and c.level == level and c.metric == metric
                 and c.role == "primary"), None)


def _signed_pct(ratio: float) -> str:
    x = 100 * (ratio - 1)
    return ("+" if x >= 0 else "−") + pct_text(abs(x))


def _r(x: float | None) -> str:
    if x is None:
        return "–"
    return f"×{x:.3f}" if 0.01 <= x < 10 else f"×{x:.3g}"


def _bounds(c: ReproComparison, effect_margin: float | None) -> str:
    """The margin in words: relative to the original's effect, or absolute."""
    span = f"[{_r(1 / (1 + c.margin))}, {_r(1 + c.margin)}]"
    if c.margin_basis == "effect" and effect_margin is not None:
        return f"margin {100 * effect_margin:.3g} % of the original effect {span}"
    return f"margin ±{100 * c.margin:.3g} % {span}"


def comparison_text(c: ReproComparison, repeats: int, effect_margin: float | None = None) -> str:
    """One line: what was compared, the figures, the difference's interval against the margin, and the verdict."""
    label = LABEL.get(c.metric, c.metric)
    if c.kind == "arm":
        unit = UNIT.get(c.metric, " ms")
        what = f"{c.arm} c={c.level}: {label} {_fig(c.original)}{unit} → {_fig(c.new)}{unit}"
    else:
        what = f"{c.arm} vs {c.baseline} c={c.level}: {label} effect {_r(c.original)} originally, {_r(c.new)} now"
    if c.ratio is not None and c.ratio_ci is not None:
        what += (f"; new/original {_r(c.ratio)} [{_r(c.ratio_ci.low)}, {_r(c.ratio_ci.high)}] "
                 f"({100 * c.interval_confidence:.0f} %)")
    p = "" if c.p_zero is None else f"p={c.p_zero:.2g}, Holm-adjusted {c.p_zero_adjusted:.2g}"
    bounds = _bounds(c, effect_margin)
    if c.verdict is None and c.status == "shift":
        shown = "" if c.p_zero is None else f" (p={c.p_zero:.2g} of no shift)"
        return f"{what}: the machines' shift{shown}, not judged"
    if c.status == "reproduced":
        way = ", direction held" if c.direction_held else ""
        seen = ""
        if c.p_zero_adjusted is not None and c.p_zero_adjusted < (1 - c.interval_confidence) / 2:
            seen = f" (the difference is detectable, {p}, but inside the pre-registered margin)"
        return f"{what} within the {bounds}{way}: reproduced{seen}"
    if c.status == "inconsistent":
        return (f"{what}: outside the original's prediction interval ({p}; {_signed_pct(c.ratio or 1.0)} %): "
                "INCONSISTENT")
    if c.status == "imprecise":
        why = "the direction did not hold" if c.direction_held is False else f"not within the {bounds}"
        need = (f"about {c.repeats_needed} repeats per arm in each run would show equivalence with 80 % power if "
                f"nothing changed (these runs had {repeats})" if c.repeats_needed else
                f"more than {MAX_REPEATS} repeats per arm in each run would be needed (the margin is small against "
                "the cells' spread)")
        return f"{what}: consistent with the original ({p}) but {why}: imprecise; {need}"
    if c.status == "too_few_cells":
        return f"{what}: imprecise ({c.reason}); at least 2 ok cells per arm in each run are needed"
    verdict = {"inconsistent": "INCONSISTENT", "imprecise": "imprecise", None: "not judged"}.get(c.verdict, "")
    return f"{what}: {verdict} ({c.reason})"


def _fig(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.4g}"


def conclusion(original: Summary, new: Summary, arm: str, level: int) -> Conclusion:
    """Same direction and same significance of the primary A/B comparison in both runs?"""
    metric = original.analysis.primary
    o, n = _primary(original, arm, level, metric), _primary(new, arm, level, metric)
    os_, ns = (o.status if o else "missing"), (n.status if n else "missing")
    judged = {"significant", "not_significant"}
    held: bool | None
    if os_ not in judged or ns not in judged:
        held, text = None, f"not judged (original: {os_}, new: {ns})"
    elif os_ == ns == "not_significant":
        held, text = True, "held: no significant difference in either run"
    elif os_ == ns == "significant":
        assert o is not None and n is not None and o.ratio is not None and n.ratio is not None
        held = (o.ratio > 1) == (n.ratio > 1)
        way = _direction(o)
        text = f"held: {arm} {way} in both runs" if held else \
            f"DID NOT HOLD: {arm} {way} originally, {_direction(n)} now (direction reversed)"
    else:
        held = False
        text = f"DID NOT HOLD: significant only in the {'original' if os_ == 'significant' else 'new'} run"
    change = (f" ({LABEL.get(metric, metric)} {_pct(o)} originally, {_pct(n)} now)")
    return Conclusion(arm=arm, baseline=original.baseline, level=level, original_status=os_, new_status=ns,
                      original_change_pct=o.change_pct if o else None, new_change_pct=n.change_pct if n else None,
                      held=held, text=f"{arm} c={level}: {text}{change}")


def _pct(c: Comparison | None) -> str:
    return "–" if c is None or c.change_pct is None else _signed_pct(1 + c.change_pct / 100) + " %"


def _direction(c: Comparison) -> str:
    better = (c.ratio or 1.0) > 1 if c.higher_is_better else (c.ratio or 1.0) < 1
    return "faster" if better else "slower"


def overall(comparisons: list[ReproComparison]) -> Verdict:
    """Over the judged comparisons: inconsistent when any is; reproduced when every one is; imprecise otherwise."""
    verdicts = [c.verdict for c in comparisons if c.judged]
    if "inconsistent" in verdicts:
        return "inconsistent"
    if verdicts and all(v == "reproduced" for v in verdicts):
        return "reproduced"
    return "imprecise"


def counts(comparisons: list[ReproComparison]) -> dict[str, int]:
    """How many judged comparisons got each verdict."""
    return {v: sum(1 for c in comparisons if c.judged and c.verdict == v)
            for v in ("reproduced", "inconsistent", "imprecise")}


def judge(original: Summary, new: Summary, rule: Rule, *, same_hardware: bool = False,
          ) -> tuple[list[ReproComparison], list[Conclusion]]:
    """Every comparison of the primary metric (each arm per level, then each effect per level) and the A/B
    conclusions, levels and arms as the original planned them.

    Each route to "inconsistent" is a test at alpha: every effect's test of no difference, and with
    ``same_hardware`` every arm's and its failure rate's (Fisher). They are one family, Holm-corrected (as kit's A/B
    comparisons are), so that the overall verdict "inconsistent" is wrong with chance at most alpha when nothing
    changed; the family is fixed before any decision (every test with a p-value, withheld or not). TOST needs no
    correction: "reproduced" needs every one (an intersection-union test, Berger 1982)."""
    same_statistic(original, new)
    raw = Judge(original, new, rule, same_hardware)
    levels = [lv.concurrency for lv in original.levels]
    arms = list(original.arms)
    others = [a for a in arms if a != original.baseline]

    def run(j: Judge) -> list[ReproComparison]:
        return [j.arm(a, lv) for lv in levels for a in arms] + [j.effect(a, lv) for lv in levels for a in others]

    family: dict[tuple[str, str, int], float] = {}
    for lv in levels:
        for a in arms if same_hardware else []:
            p_fail = raw.fisher(a, lv)
            if p_fail is not None:
                family["fisher", a, lv] = p_fail
    for c in run(raw):
        if c.p_zero is not None and c.judged:
            family[c.kind, c.arm, c.level] = c.p_zero
    adjusted = dict(zip(family, holm_adjusted(list(family.values())), strict=True))
    comps = run(Judge(original, new, rule, same_hardware, adjusted))
    return comps, [conclusion(original, new, a, lv) for lv in levels for a in others]


def same_statistic(original: Summary, new: Summary) -> None:
    """Both runs' cells must hold the original's pre-registered cell statistic (and, for goodput or SLO attainment,
    its SLO): a new run summarized under another cannot be judged under the original's analysis."""
    def rule(s: Summary) -> str:
        a = s.analysis
        slo = f", SLO {a.slo}" if a.primary in ("goodput_req_s", "slo_attainment") else ""
        trim = f" (trim {a.cell_statistic_trim:g})" if a.cell_statistic_trim is not None else ""
        return f"{a.cell_statistic or 'mean'}{trim}{slo}"
    if rule(original) != rule(new):
        raise UsageError(
            f"the runs' cell statistics differ (original: {rule(original)}; new: {rule(new)}): the new run cannot "
            "be judged under the original's pre-registered analysis",
            hint="re-run it under the original's manifest (`kit reproduce` does): both runs must share its "
                 "analysis.statistic, analysis.trim and analysis.slo")
