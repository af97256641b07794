"""The simulation suite's scenarios and what is counted over their experiments (tests/stats/sim.py makes them).

Every experiment goes through ``compare_levels`` with kit's defaults (primary TPOT mean, Holm, 95 %). Counted
per scenario: family-wise false alarms (an experiment with any significant call where the truth is no
difference), verdicts and withheld comparisons, detection of a true effect, wrong-direction calls, coverage of
the true TPOT ratio by the reported interval against the interval's stated level, the mean TPOT estimate, and,
for comparison, the family-wise rate of scipy's Welch test on cell TPOT means computed here from the raw records
(ok requests only, no guardrails, Holm/Bonferroni's any-rejection at alpha / levels).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import stats as sps
from sim import ARMS, Experiment, SimArm, SimDesign, simulate

from kit.stats import compare_levels

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
VERDICTS = ("significant", "not_significant")


@dataclass(frozen=True)
class Scenario:
    key: str
    label: str
    design: SimDesign
    kind: str  # "aa": no true difference; "effect": a true TPOT effect; "single": one cell per arm;
    # "timeouts": A/A where the guardrail must withhold every verdict
    fast: int  # experiments in the fast (unit) tier
    slow: int  # in the slow tier of `make test`
    full: int  # in the full run: `make stats-table` (docs/statistics.md's table, and the slow tests at this count)

    @property
    def seed(self) -> int:
        return zlib.crc32(self.key.encode())

    def count(self, tier: str) -> int:
        """Its number of experiments in a tier: "fast", "slow" or "full"."""
        if tier not in TIERS:
            raise ValueError(f"unknown simulation tier {tier!r}: one of {', '.join(TIERS)}")
        return int(getattr(self, tier))


def aa(cells: int, **kw: Any) -> SimDesign:
    return SimDesign(arms={"a": SimArm(cells=cells), "b": SimArm(cells=cells, **kw)})


def effect(pct: float, cells: int = 5, levels: tuple[int, ...] | None = None) -> SimDesign:
    return SimDesign(arms={"a": SimArm(cells=cells),
                           "b": SimArm(cells=cells, tpot_effect=1 - pct / 100, effect_levels=levels)})


TIERS = ("fast", "slow", "full")
# Experiments per scenario and tier. A scenario's first n experiments are the same in every tier (its own seed),
# so a tier with fewer is a prefix of the full run. The slow tier's counts keep what its tests assert meaningful
# (tests/stats/test_stats_simulation.py says how) at about 40 % of the full run's CPU time.
AA_FAST, AA_SLOW, AA_FULL, EFFECT_FAST, EFFECT_SLOW, EFFECT_FULL = 50, 300, 700, 20, 150, 400
SINGLE_SLOW, SINGLE_FULL = 100, 200
SCENARIOS: tuple[Scenario, ...] = (
    Scenario("aa2", "A/A, 2 cells per arm", aa(2), "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("aa3", "A/A, 3 cells per arm", aa(3), "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("aa5", "A/A, 5 cells per arm", aa(5), "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("unequal3v2", "A/A, 3 vs 2 cells, cell sd 1 % vs 6 %",
             SimDesign(arms={"a": SimArm(cells=3, cell_sd=0.01), "b": SimArm(cells=2, cell_sd=0.06)}),
             "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("unequal5v3", "A/A, 5 vs 3 cells, cell sd 1 % vs 5 %",
             SimDesign(arms={"a": SimArm(cells=5, cell_sd=0.01), "b": SimArm(cells=3, cell_sd=0.05)}),
             "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("drift-interleaved", "A/A, 4 cells, drift 1 %/cell, interleaved",
             replace(aa(4), drift=0.01, order="interleaved"), "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("drift-abba", "A/A, 4 cells, drift 1 %/cell, ABBA", replace(aa(4), drift=0.01), "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("bad-starts", "A/A, 3 cells, 15 % bad starts (+20–50 %)", replace(aa(3), bad_start_frac=0.15),
             "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("bad-starts5", "A/A, 5 cells, 15 % bad starts (+20–50 %)", replace(aa(5), bad_start_frac=0.15),
             "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("errors", "A/A, 3 cells, 5 % HTTP errors in one arm", aa(3, error_frac=0.05), "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("timeouts5", "A/A, 3 cells, slowest 5 % time out in one arm", aa(3, timeout_frac=0.05),
             "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("timeouts15-16req", "A/A, 3 × 16 requests, slowest 15 % time out in one arm",
             aa(3, timeout_frac=0.15), "aa", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("timeouts15", "A/A, 3 × 32 requests, slowest 15 % time out in one arm",
             replace(aa(3, timeout_frac=0.15), requests=32), "timeouts", AA_FAST, AA_SLOW, AA_FULL),
    Scenario("single", "A/A, 1 cell per arm", aa(1), "single", AA_FAST, SINGLE_SLOW, SINGLE_FULL),
    *(Scenario(f"effect{p}-all", f"TPOT −{p} %, all levels, 5 cells", effect(p), "effect", EFFECT_FAST, EFFECT_SLOW, EFFECT_FULL)
      for p in (2, 5, 10, 20)),
    *(Scenario(f"effect{p}-c1", f"TPOT −{p} % at c=1 only, 5 cells", effect(p, levels=(1,)), "effect",
               EFFECT_FAST, EFFECT_SLOW, EFFECT_FULL) for p in (2, 5, 10, 20)),
    Scenario("effect10-3cells", "TPOT −10 %, all levels, 3 cells", effect(10, cells=3), "effect",
             EFFECT_FAST, EFFECT_SLOW, EFFECT_FULL),
)
BY_KEY = {s.key: s for s in SCENARIOS}


@dataclass
class Result:
    """Counts over a scenario's experiments."""

    key: str
    n: int = 0
    fw_primary: int = 0  # experiments with a significant primary call where the truth is no difference
    fw_secondary: int = 0  # the same in the secondary family
    any_significant: int = 0  # experiments with any significant call at all
    verdicts: int = 0  # experiments with at least one verdict (significant or not)
    comparisons: int = 0
    withheld: int = 0  # comparisons whose verdict was withheld
    affected: int = 0  # primary comparisons with a true effect
    detected: int = 0  # ... called significant in the true direction
    any_detected: int = 0  # experiments with at least one such call
    wrong_direction: int = 0  # significant primary calls against the true direction
    intervals: int = 0  # primary comparisons with an interval
    covered: int = 0  # ... that contain the true ratio
    nominal: float = 0.0  # sum of their stated confidence levels
    all_covered: int = 0  # experiments whose primary intervals all contain the truth
    log_error: float = 0.0  # sum of log(estimate / truth) over primary comparisons with an estimate
    estimates: int = 0
    scipy_fw: int = 0  # experiments where scipy's Welch rejects at a null level (any-rejection, alpha / levels)
    p_values: list[tuple[float, float]] = field(default_factory=list, repr=False)  # (kit, scipy) primary p

    def rate(self, count: int) -> float:
        return count / self.n if self.n else math.nan


def upper95(count: int, n: int) -> float:
    """One-sided 95 % Clopper–Pearson upper bound of a rate."""
    return 1.0 if count >= n else float(sps.beta.ppf(0.95, count + 1, n - count))


def lower95(count: int, n: int) -> float:
    """One-sided 95 % Clopper–Pearson lower bound of a rate."""
    return 0.0 if count <= 0 else float(sps.beta.ppf(0.05, count, n - count + 1))


def tpot_cell_means(cells: Sequence[Sequence[dict[str, Any]]]) -> np.ndarray:
    """Each cell's mean TPOT over its ok requests, from the raw records (written here, not by kit)."""
    out = []
    for recs in cells:
        tpots = [(r["e2e_ns"] - r["ttft_ns"]) / (r["usage_completion_tokens"] - 1) for r in recs
                 if r["status"] == 200 and r["error"] is None and r["chunk_ns"]]
        if tpots:
            out.append(float(np.mean(tpots)))
    return np.asarray(out)


def _scipy_alarm(exp: Experiment, d: SimDesign) -> tuple[bool, list[float]]:
    """scipy's Welch test per level on log TPOT cell means; an alarm when any null level has p <= alpha/m (Holm
    rejects anything exactly when Bonferroni does)."""
    ps = []
    alarm = False
    for level in d.levels:
        a, b = (np.log(tpot_cell_means(exp.records[(arm, level)])) for arm in ARMS)
        if a.size < 2 or b.size < 2:
            ps.append(math.nan)
            continue
        p = float(sps.ttest_ind_from_stats(b.mean(), b.std(ddof=1), b.size, a.mean(), a.std(ddof=1), a.size,
                                           equal_var=False).pvalue)  # ttest_ind(b, a, equal_var=False), faster
        ps.append(p)
        alarm |= d.true_ratio(level) == 1.0 and p <= ALPHA / len(d.levels)
    return alarm, ps


def _count(r: Result, comps: Sequence[Mapping[str, Any]], d: SimDesign) -> None:
    tested = [c for c in comps if c["tested"]]
    r.n += 1
    r.comparisons += len(tested)
    r.withheld += sum(c["status"] not in VERDICTS for c in tested)
    r.verdicts += any(c["status"] in VERDICTS for c in tested)
    r.any_significant += any(c["significant"] for c in tested)
    null_sig = {"primary": False, "secondary": False}
    all_cov = True
    for c in tested:
        truth = d.true_ratio(c["level"])
        # a TPOT effect moves TPOT, ITL, E2E and throughput at its levels, never TTFT
        null = truth == 1.0 or c["metric"] == "ttft_mean_ms"
        if c["significant"] and null:
            null_sig[c["role"]] = True
        if c["role"] != "primary":
            continue
        if truth != 1.0:
            right = c["significant"] and (c["ratio"] < 1) == (truth < 1)
            r.affected += 1
            r.detected += right
            r.wrong_direction += c["significant"] and not right
        if c["ratio_ci"] is not None:
            cov = c["ratio_ci"][0] <= truth <= c["ratio_ci"][1]
            r.intervals += 1
            r.covered += cov
            r.nominal += c["interval_confidence"]
            all_cov &= cov
            r.log_error += math.log(c["ratio"] / truth)
            r.estimates += 1
    r.fw_primary += null_sig["primary"]
    r.fw_secondary += null_sig["secondary"]
    r.all_covered += all_cov
    r.any_detected += any(c["significant"] and c["role"] == "primary" and d.true_ratio(c["level"]) != 1.0
                          and (c["ratio"] < 1) == (d.true_ratio(c["level"]) < 1) for c in tested)


def run(s: Scenario, n: int, method: str = "welch") -> Result:
    """n experiments of a scenario (its own seed: the first n of the full run are the fast and slow tiers'), the
    comparison under ``method`` (analysis.method: "welch", or "blocked", kit's default: ABBA blocks of 2 repeats,
    each cell's repeat from its id)."""
    return run_methods(s, n, (method,))[method]


def run_methods(s: Scenario, n: int, methods: Sequence[str]) -> dict[str, Result]:
    """``run`` under each of ``methods`` on the same n experiments: each is simulated once and compared under every
    method (the comparison draws nothing from the generator, so each method's counts are exactly ``run``'s)."""
    rng = np.random.default_rng(s.seed)
    d = s.design
    results = {m: Result(s.key) for m in methods}
    # where both see the same cells (every request ok), kit's p is scipy's Welch p, or larger with unequal counts
    same = not any(a.timeout_frac or a.error_frac for a in d.arms.values())
    for _ in range(n):
        exp = simulate(rng, d)
        for method, r in results.items():
            comps, _, _ = compare_levels(exp.levels, list(ARMS), "a", primary="tpot_mean_ms", correction="holm",
                                         confidence=CONFIDENCE, method=method)
            _count(r, comps, d)
            if s.kind == "effect" or method != "welch":
                continue
            alarm, ps = _scipy_alarm(exp, d)
            r.scipy_fw += alarm
            if same:
                prim = [c["p_value"] for c in comps if c["role"] == "primary"]
                r.p_values.extend((k, p) for k, p in zip(prim, ps, strict=True) if k is not None)
    return results


def run_all(tier: str, keys: Sequence[str] | None = None) -> dict[str, Result]:
    """Every scenario (or those named) at the tier's number of experiments ("fast", "slow" or "full")."""
    return {s.key: run(s, s.count(tier)) for s in SCENARIOS if keys is None or s.key in keys}
