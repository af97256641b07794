"""Expand a manifest into the ordered cells (arm x repeat) that a run executes, estimate its duration, and say
what its design can detect on the primary metric (the maths: ``kit.stats.power``)."""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from kit import plan_requests, plan_sequential
from kit.bundle import extracted, is_archive, verify_integrity
from kit.bundle.verify import signed_statement
from kit.errors import BundleError, UsageError
from kit.files import JsonObject
from kit.files.plan import PlanFile
from kit.manifest import Manifest
from kit.plan_timing import Estimate, Timing, estimate_run, measured_timing
from kit.stats import power
from kit.stats.ab import LevelSamples, metric_by_key
from kit.stats.bundle import level_samples
from kit.stats.cellstat import MEAN, CellRule
from kit.stats.metrics import Metric
from kit.stats.pilot import PilotLevel, pilot_level
from kit.stats.power import log_cell_stats
from kit.stats.summary import analysis_rule


@dataclass(frozen=True)
class Cell:
    """One server lifetime: an arm, started once, driven through every level, stopped."""

    index: int
    arm: str
    repeat: int

    @property
    def id(self) -> str:
        return f"{self.arm}-r{self.repeat}"


@dataclass(frozen=True)
class LevelPlan:
    concurrency: int          # closed loop: the users; open loop: the most requests in flight
    requests: int
    warmup: int
    rate: float | None = None  # open loop: requests per second (load.arrival.rates), None in a closed loop


@dataclass(frozen=True)
class Plan:
    cells: tuple[Cell, ...]
    levels: tuple[LevelPlan, ...]
    order: str
    start: tuple[str, ...] | None = None  # abba: the arm order of the first block, drawn with design.seed

    def as_dict(self) -> JsonObject:
        """The plan as `kit plan --json` prints it (plan.json is ``to_file``, with its schema_version)."""
        out: JsonObject = {
            "order": self.order,
            "cells": [{**asdict(c), "id": c.id} for c in self.cells],
            "levels": [{k: v for k, v in asdict(lv).items() if k != "rate" or v is not None} for lv in self.levels],
        }
        if self.start is not None:
            out["start"] = list(self.start)
        return out

    def to_file(self) -> PlanFile:
        return PlanFile.model_validate(self.as_dict())


def make_plan(m: Manifest) -> Plan:
    arms = [a.name for a in m.arms]
    reps = range(1, m.design.repeats + 1)
    order = m.design.order
    start: tuple[str, ...] | None = None
    if order == "abba":
        first = list(arms)
        random.Random(f"abba:{m.design.seed}").shuffle(first)
        start = tuple(first)
        pairs = [(a, r) for r in reps for a in (first if r % 2 else first[::-1])]
    elif order == "blocked":
        pairs = [(a, r) for a in arms for r in reps]
    elif order == "counterbalanced":
        pairs = [(a, r) for r in reps for a in (arms if r % 2 else arms[::-1])]
    else:
        pairs = [(a, r) for r in reps for a in arms]
        if order == "random":
            random.Random(m.design.seed).shuffle(pairs)
    cells = tuple(Cell(i, a, r) for i, (a, r) in enumerate(pairs))
    levels = tuple(LevelPlan(c, m.load.requests_at(c), m.load.warmup_at(c), m.load.rate_at(c)) for c in m.load.levels)
    return Plan(cells=cells, levels=levels, order=order, start=start)


# --------------------------------------------------------------------------- power before the run


@dataclass(frozen=True)
class LevelPower:
    """One level's detectable effect on the primary metric (log effects; see kit.stats.power)."""

    concurrency: int
    log_sd: float  # between-cell SD of the log cell statistics planned with (a pilot's: its upper bound)
    source: str  # "assumed ...", or where the pilot measured it
    mde: float | None  # |log(arm/baseline)| detected with TARGET_POWER; None: out of reach
    power_at_target: float | None = None  # with --target-effect: the planned design's power for it
    repeats_needed: int | None = None  # with --target-effect: cells per arm for TARGET_POWER (None: > max)
    estimate_sd: float | None = None  # a pilot's: its pooled SD estimate (log_sd is its upper confidence bound)
    df: int | None = None  # a pilot's: the estimate's degrees of freedom
    power_at_estimate: float | None = None  # with --target-effect and a pilot: the power if the SD were the estimate

    @property
    def cv(self) -> float:
        """The between-cell coefficient of variation that ``log_sd`` means (lognormal)."""
        return power.cv_from_sd(self.log_sd)


@dataclass(frozen=True)
class PowerPlan:
    primary: str
    repeats: int
    arms_tested: int  # non-baseline arms
    family: int  # m = levels x non-baseline arms
    correction: str
    alpha: float
    levels: tuple[LevelPower, ...]
    pilot: str | None = None
    target_effect: float | None = None  # a relative change, e.g. 0.05
    even: bool = False  # abba: repeats rounded up to even
    method: str = "welch"  # analysis.method: the test the power is for
    statistic: str = "mean"  # analysis.statistic
    minutes: float | None = None  # the planned run's estimated time
    options: tuple[plan_requests.Option, ...] = ()  # with --target-effect: repeats x requests per cell, and time
    sequential: plan_sequential.SequentialPlan | None = None  # design.sequential: power and looks to a decision
    estimate: Estimate | None = None  # the run's time: assumed, or timed as the pilot's cells ran

    @property
    def tail(self) -> float:
        """The two-sided tail the MDE uses: alpha/m (Bonferroni, and Holm's first, strictest step)."""
        return self.alpha / self.family

    def as_dict(self) -> JsonObject:
        out: JsonObject = {k: v for k, v in asdict(self).items() if k != "levels"}
        out.update(tail=self.tail, target_power=power.TARGET_POWER, max_repeats=power.MAX_REPEATS)
        out["pilot_confidence"] = power.PILOT_CONFIDENCE if self.pilot else None
        out["options"] = [asdict(o) for o in self.options]
        out["sequential"] = None if self.sequential is None else self.sequential.as_dict()
        out["levels"] = [{**asdict(lv), "cv": lv.cv,
                          "mde_pct_up": None if lv.mde is None else power.percent_up(lv.mde),
                          "mde_pct_down": None if lv.mde is None else power.percent_down(lv.mde)}
                         for lv in self.levels]
        return out


def parse_fraction(text: str | None, what: str) -> float | None:
    """'5%' or '0.05' -> 0.05 (a bare number must be below 1: '5' is ambiguous); None stays None."""
    if text is None:
        return None
    raw = text.strip()
    pct = raw.endswith("%")
    try:
        value = float(raw[:-1] if pct else raw)
    except ValueError:
        raise UsageError(f"{what} {text!r} is not a number", hint=f"write e.g. {what} 5% or {what} 0.05") from None
    if pct:
        value /= 100
    if not (math.isfinite(value) and value > 0) or (not pct and value >= 1):
        raise UsageError(f"{what} {text!r} must be a positive fraction (0.05) or percentage (5%)",
                         hint=f"write e.g. {what} 5% or {what} 0.05")
    return value


def pilot_sd(root: Path, metric: Metric, rule: CellRule = MEAN,
             method: str = "welch") -> dict[int, tuple[float, int, int]]:
    """Per level of a pilot bundle: the SD of the log cell statistics of ``metric`` that the test sees (welch: pooled
    within arms; blocked: within blocks of one repeat), its df and the cells used; ``pilot_levels`` for the rest."""
    return {c: (lv.sd, lv.df, lv.cells) for c, lv in pilot_levels(root, metric, rule, method).items()}


def pilot_levels(root: Path, metric: Metric, rule: CellRule = MEAN, method: str = "welch") -> dict[int, PilotLevel]:
    """Per level of a pilot bundle (a directory or a `kit archive` .tar.gz): the SD, df, cells and the requests'
    share of the variance (``kit.stats.pilot``). The bundle's files must match its signed provenance (trust is
    not judged: it only informs a plan); every arm needs 2 cells with the metric at every level."""
    return read_pilot(root, metric, rule, method)[0]


def read_pilot(root: Path, metric: Metric, rule: CellRule = MEAN, method: str = "welch"
               ) -> tuple[dict[int, PilotLevel], Timing | None]:
    """``pilot_levels``, and what the pilot measured of time (``kit.plan_timing``), from one verified read."""
    if is_archive(root):  # by its gzip bytes, whatever its name
        with extracted(root, signed_statement(str(root))) as top:  # only what its provenance signs is written
            return _pilot_levels(top, metric, rule, method, label=root), measured_timing(top)
    if not root.is_dir():
        what = "no such directory" if not root.exists() else "neither a bundle directory nor a gzip archive"
        raise UsageError(f"pilot bundle {root}: {what}",
                         hint="give a bundle directory of an earlier run, or its `kit archive` .tar.gz")
    return _pilot_levels(root, metric, rule, method, label=root), measured_timing(root)


def _pilot_levels(root: Path, metric: Metric, rule: CellRule, method: str, *, label: Path) -> dict[int, PilotLevel]:
    try:
        verify_integrity(root)
    except BundleError as e:
        raise e.note("kit plan --pilot reads only bundles whose files match their signed provenance") from None
    out: dict[int, PilotLevel] = {}
    hint = "give a pilot with at least 2 repeats per arm that recorded it, or assume a CV with --cv"
    for ls in level_samples(root):
        for arm, cells in ls.arms.items():
            if len(cells) < 2:
                raise UsageError(f"pilot bundle {label}: arm {arm} has {len(cells)} ok cell(s) at c={ls.level}; the "
                                 "between-cell variation needs at least 2", hint=hint)
            logs = log_cell_stats(LevelSamples(ls.level, {arm: cells}, {}, {}), metric, rule)[arm]
            if logs.size < 2:
                raise UsageError(f"pilot bundle {label}: arm {arm} at c={ls.level} has no {metric.key} in "
                                 f"{len(cells) - logs.size} of its {len(cells)} cells", hint=hint)
        got = pilot_level(ls, metric, rule, method)
        if got is not None and power.cv_from_sd(got.sd) < power.MIN_CV:
            raise UsageError(f"pilot bundle {label}: the cells at c={ls.level} have the same {metric.key} in every "
                             f"arm (between-cell CV {power.cv_from_sd(got.sd):.3g}): the pilot shows no variation "
                             "to plan with", hint="a pilot of real runs varies from cell to cell (were its cells "
                             "replayed or cached?); or assume a CV with --cv")
        if got is not None:
            out[ls.level] = got
    if not out:
        raise UsageError(f"pilot bundle {label}: no level with cells to measure", hint=hint)
    return out


def _pooled_over_levels(sds: dict[int, tuple[float, int, int]]) -> tuple[float, int]:
    df = sum(d for _, d, _ in sds.values())
    return math.sqrt(sum(sd**2 * d for sd, d, _ in sds.values()) / df), df


def power_plan(m: Manifest, *, cv: float | None = None, pilot: Path | None = None,
               target_effect: float | None = None, itl_ms: float = 20.0) -> PowerPlan:
    """The detectable effect per level on the primary metric for the manifest's design and pre-registered test
    (docs/statistics.md, "Power and the detectable effect"): CV assumed (``cv``; default kit's measured values,
    power.default_cv) or measured in a ``pilot`` bundle, then planned at the upper PILOT_CONFIDENCE bound of the
    pilot's SD (its chi-square distribution): a pilot's SD is an estimate, and planning at the estimate falls short
    about half the time. With a pilot and a target: repeats x requests per cell options and their time
    (``kit.plan_requests``)."""
    if cv is not None and pilot is not None:
        raise UsageError("give --cv or --pilot, not both", hint="--pilot measures the CV; --cv assumes one")
    if cv is not None and cv < power.MIN_CV:
        raise UsageError(f"--cv {cv:g} is below {power.MIN_CV:g}: a between-cell CV that small is no variation to "
                         "plan with (the detectable effect would be 0)",
                         hint=f"assume a realistic CV (measured: {power.DEFAULT_CV_SOURCE[power.DEFAULT_CV]}), or "
                         "measure it with "
                         "--pilot BUNDLE")
    metric = metric_by_key(m.analysis.primary)
    rule, method = analysis_rule(m)
    k = m.design.repeats
    arms_tested = len(m.arms) - 1
    family = len(m.load.levels) * arms_tested
    tail = (1 - m.analysis.confidence) / family
    even = m.design.order == "abba"
    pls, timing = read_pilot(pilot, metric, rule, method) if pilot is not None else ({}, None)
    sds = {c: (lv.sd, lv.df, lv.cells) for c, lv in pls.items()}
    assumed = cv if cv is not None else power.default_cv(m.hardware.gpus != 0)
    levels = []
    for c in m.load.levels:
        estimate: tuple[float, int] | None = None
        if pilot is None:
            sd = power.sd_from_cv(assumed)
            source = "assumed" if cv is not None else f"assumed: {power.DEFAULT_CV_SOURCE[assumed]}"
        elif c in sds:
            estimate, n = sds[c][:2], sds[c][2]
            source = f"pilot c={c}, {n} cells"
        else:
            estimate = _pooled_over_levels(sds)
            source = f"pilot: no c={c} there, pooled over its levels"
        if estimate is not None:  # the pilot's SD is uncertain: plan at its upper confidence bound
            sd = power.sd_upper_bound(*estimate)
        at_target = needed = at_estimate = None
        if target_effect is not None:
            effect = math.log1p(target_effect)
            at_target = power.power(effect, sd, k, k, tail, method)
            needed = power.repeats_needed(effect, sd, tail, even=even, method=method)
            if estimate is not None:
                at_estimate = power.power(effect, estimate[0], k, k, tail, method)
        levels.append(LevelPower(c, sd, source, power.mde(sd, k, k, tail, method=method), at_target, needed,
                                 estimate[0] if estimate else None, estimate[1] if estimate else None, at_estimate))
    est = estimate_run(m, make_plan(m), itl_ms=itl_ms, timing=timing)
    options = () if target_effect is None else plan_requests.options(
        m, est, levels, pls, math.log1p(target_effect), tail, method, even)
    return PowerPlan(primary=metric.key, repeats=k, arms_tested=arms_tested, family=family,
                     correction=m.analysis.correction, alpha=1 - m.analysis.confidence, levels=tuple(levels),
                     pilot=None if pilot is None else str(pilot), target_effect=target_effect, even=even,
                     method=method, statistic=rule.statistic, minutes=est.seconds / 60, options=options, estimate=est,
                     sequential=plan_sequential.sequential_plan(m, levels, tail, method, target_effect,
                                                                est.seconds / 60))


def _sd_text(lv: LevelPower) -> str:
    if lv.estimate_sd is None:
        return lv.source
    return (f"the {100 * power.PILOT_CONFIDENCE:.0f} % upper confidence bound of the pilot's "
            f"{100 * power.cv_from_sd(lv.estimate_sd):.1f} % on {lv.df} df, chi-square; {lv.source}")


def _mde_text(d: float | None, repeats: int) -> str:
    if d is None:
        return ("nothing detectable (fewer than 2 cells per arm: kit gives no verdict)" if repeats < 2 else
                "nothing detectable at any plausible size")
    return (f"detects +{power.percent_up(d):.1f} % / −{power.percent_down(d):.1f} % "
            f"(×{math.exp(d):.3f} / ×{math.exp(-d):.3f})")


def power_lines(pp: PowerPlan) -> list[str]:
    """``kit plan``'s power section: the detectable effect per level and, with a target, the repeats it needs."""
    pct = f"{100 * power.TARGET_POWER:.0f} %"
    step = ("Holm; the MDE uses its first, strictest step" if pp.correction == "holm" else "Bonferroni")
    arms = f"{pp.arms_tested} arm{'s' if pp.arms_tested != 1 else ''}"
    test = ("the blocked (paired) t" if pp.method == "blocked" else "Welch's t") + \
        f" on log cell statistics ({pp.statistic})"
    out = [f"  power on the primary metric {pp.primary} at {pct} (docs/statistics.md, \"Power and the detectable "
           "effect\"):",
           f"    {test}, {pp.repeats} cells per arm; family m = {pp.family} "
           f"({len(pp.levels)} levels x {arms}), {step}: two-sided alpha/m = "
           f"{pp.alpha:.3g}/{pp.family} = {pp.tail:.3g}"]
    for lv in pp.levels:
        out.append(f"    c={lv.concurrency:<5} between-cell CV {100 * lv.cv:.1f} % ({_sd_text(lv)}): "
                   f"{_mde_text(lv.mde, pp.repeats)}")
    if pp.target_effect is not None:
        e = 100 * pp.target_effect
        even = ", rounded up to even for ABBA" if pp.even else ""
        out.append(f"    a change of ±{e:.3g} % (ratio ×{1 + pp.target_effect:.3g}; the decrease is as easy or easier) "
                   f"at {pct} power needs, per arm{even}:")
        for lv in pp.levels:
            now = f"{pp.repeats} planned: power {100 * (lv.power_at_target or 0):.0f} %"
            if lv.power_at_estimate is not None:
                now += f" at the bound, {100 * lv.power_at_estimate:.0f} % if the SD were the pilot's estimate"
            need = (f"{lv.repeats_needed} repeats" if lv.repeats_needed is not None else
                    f"more than {power.MAX_REPEATS} repeats")
            out.append(f"    c={lv.concurrency:<5} {need} ({now})")
        out += plan_requests.option_lines(pp.options)
        if any(lv.repeats_needed is None for lv in pp.levels):
            out.append(f"    out of reach within {power.MAX_REPEATS} repeats per arm: lower the between-cell CV (more "
                       "requests per cell, a quieter machine) or test fewer levels x arms")
    source = (f"the pilot's SD at its {100 * power.PILOT_CONFIDENCE:.0f} % upper confidence bound" if pp.pilot else
              "assumed: set it with --cv, or measure it with --pilot BUNDLE")
    if pp.minutes is not None:
        out.append(f"    the planned run ({pp.repeats} repeats per arm) takes about {pp.minutes:.0f} min (the estimate "
                   "above)")
    exact = ("kit's blocked test (the within-repeat SD)" if pp.method == "blocked" else "kit's Welch test")
    out.append(f"    assumes: log cell statistics normal with the same between-cell CV in both arms ({source}), "
               f"equal cells per arm, independent cells, no drift; the power is exact for {exact}")
    return out + plan_sequential.sequential_lines(pp.sequential, [lv.concurrency for lv in pp.levels])
