"""`kit reproduce --until-decided` under simulation: an independent generator and its own statistics, kit's
group-sequential decision (``kit.reproduce.sequential.decide_look``) on them, look by look.

The generator (numpy, no kit code): per reproduction an original and a new run of two arms at one level, ``repeats``
cells per arm in each, each cell's statistic lognormal around its arm's true value with between-cell CV ``cv`` (as
tests/stats/sim_reproduce.py draws them); the variant's true effect is x0.8 in the original and whatever the
scenario says in the new run. Its own contrast: each repeat's adjacent pair is one block (kit's blocked analysis
with one repeat a block), so a run's effect is the mean of its per-repeat log differences d_r, its SE sd(d) /
sqrt(n) on n - 1 df, written here in closed form (tests/stats/test_reproduce_until_simulation.py checks it against
kit's ``blocked`` on the same cells). The original found its effect when its own paired t rejects at alpha.

At look k (the new run's first 2k repeats): D_k = (new effect so far) - (original effect), its SE
sqrt(se_o^2 + se_n(k)^2), Satterthwaite's df, the new effect's SE at the planned repeats sd(d so far) / sqrt(max);
these go to kit's ``decide_look`` with the looks before, and the run stops at the first look whose verdict is
decided (``stop_of``). The fixed design's verdict on the same cells (every planned cell) is kit's fixed rule
(``judge_effects``).

``python -m tests.stats.sim_reproduce_until --write-table docs/reproduce.md`` rewrites the table between the
markers (``make repro-table``); without ``--write-table`` it prints it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

from kit.reproduce.decide import EffectCells, Rule, judge_effects
from kit.reproduce.equivalence import Contrast
from kit.reproduce.sequential import LookStat, Past, decide_look, stop_of
from tests.stats.doc_tables import replace_between

TRUE_EFFECT = 0.8
ALPHA = 0.05
MARGIN = 0.5  # analysis.reproduce.margin: of the effect the original found
ABSOLUTE = math.log1p(0.05)  # analysis.reproduce_margin where it found none
EDGE = MARGIN * abs(math.log(TRUE_EFFECT))  # the margin the rule expects for the true effect: true |D| = EDGE
RULE = Rule(effect_margin=MARGIN, absolute_margin=0.05, alpha=ALPHA)
EDGE_RULE = Rule(effect_margin=MARGIN, absolute_margin=math.expm1(EDGE), alpha=ALPHA)  # EDGE, absolute
FULL = 4000
BEGIN = "<!-- repro-until:begin (python -m tests.stats.sim_reproduce_until --write-table docs/reproduce.md) -->"
END = "<!-- repro-until:end -->"


@dataclass(frozen=True)
class Scenario:
    name: str
    shift: float  # the new run's true log effect minus the original's (D's true value)
    fixed_margin: bool = False  # judge against EDGE around zero (no claim, no direction): the TOST's own null
    noise: float = 1.0  # the new run's between-cell CV over the original's


SCENARIOS = (
    Scenario("faithful", 0.0),
    Scenario("faithful, new run's CV ×2", 0.0, noise=2.0),
    Scenario("D = +margin", EDGE, True),
    Scenario("D = −margin", -EDGE, True),
    Scenario("effect vanished", -math.log(TRUE_EFFECT)),
)


def _cells(rng: np.random.Generator, log_mean: float, cv: float, shape: tuple[int, int]) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv * cv))
    out: np.ndarray = log_mean + rng.normal(-sigma * sigma / 2, sigma, size=shape)
    return out


def paired(d: np.ndarray) -> tuple[float, float, float]:
    """The mean of the per-repeat differences, its SE and df (the closed form of the blocked estimate)."""
    n = d.size
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), float(n - 1)


@dataclass(frozen=True)
class Outcome:
    verdict: str
    repeats: int  # the new run's repeats per arm when it stopped
    fixed: str  # the fixed design's verdict on every planned cell


def one(oa: np.ndarray, ob: np.ndarray, na: np.ndarray, nb: np.ndarray, fixed_margin: bool) -> Outcome:
    """One reproduction: looks after each 2 repeats of the new run until decided; and the fixed rule."""
    most = na.size
    est_o, se_o, df_o = paired(oa - ob)
    found = 2 * sps.t.sf(abs(est_o) / se_o, df_o) < ALPHA
    claimed = None if fixed_margin or not found else est_o
    delta = EDGE if fixed_margin else (MARGIN * abs(claimed) if claimed is not None else ABSOLUTE)
    history: list[Past] = []
    verdict, used = "imprecise", most
    for k in range(1, most // 2 + 1):
        n = 2 * k
        d = na[:n] - nb[:n]
        est_n, se_n, df_n = paired(d)
        se = math.sqrt(se_o**2 + se_n**2)
        df = se**4 / (se_o**4 / df_o + se_n**4 / df_n)
        stat = LookStat(Contrast(est_n - est_o, se, df, ()), 2 / n, 2 / most, df_n, df_o, se_o,
                        float(d.std(ddof=1) / math.sqrt(most)), delta, claimed)
        final = n == most
        (dec,) = decide_look([history], [stat], ALPHA, final=final)
        history.append(Past(dec.fraction, dec.p_zero if dec.tested and dec.p_zero is not None else 1.0,
                            dec.p_lower if dec.tested and dec.p_lower is not None else 1.0,
                            dec.p_upper if dec.tested and dec.p_upper is not None else 1.0,
                            dec.direction_held, dec.tested))
        stop, headline, _ = stop_of([dec.verdict], final)
        if stop is not None:
            verdict, used = str(headline), n
            break
    blocks = list(range(most))
    e = EffectCells(oa, ob, na, nb, claimed is not None, (blocks, blocks), (blocks, blocks))
    (fx,) = judge_effects([e], EDGE_RULE if fixed_margin else RULE)  # the fixed rule with the same margin
    return Outcome(verdict, used, "imprecise" if fx is None else fx.verdict)


@dataclass(frozen=True)
class Row:
    scenario: str
    cv: float
    repeats: int
    pairs: int
    counts: dict[str, int]
    fixed: dict[str, int]
    mean_repeats: float

    def pct(self, n: int) -> float:
        return 100.0 * n / self.pairs


def rates(scenario: Scenario, cv: float, repeats: int, pairs: int, seed: int) -> Row:
    rng = np.random.default_rng(seed)
    shape = (pairs, repeats)
    base = math.log(10.0)
    oa, ob = _cells(rng, base + math.log(TRUE_EFFECT), cv, shape), _cells(rng, base, cv, shape)
    na = _cells(rng, base + math.log(TRUE_EFFECT) + scenario.shift, cv * scenario.noise, shape)
    nb = _cells(rng, base, cv * scenario.noise, shape)
    counts = {"inconsistent": 0, "reproduced": 0, "imprecise": 0}
    fixed = dict(counts)
    used = 0
    for i in range(pairs):
        o = one(oa[i], ob[i], na[i], nb[i], scenario.fixed_margin)
        counts[o.verdict] += 1
        fixed[o.fixed] += 1
        used += o.repeats
    return Row(scenario.name, cv, repeats, pairs, counts, fixed, used / pairs)


CVS = (0.03, 0.10)
MAX_REPEATS = (8, 16)


def _row(args: tuple[int, int, int, int]) -> Row:
    i, j, k, pairs = args
    return rates(SCENARIOS[i], CVS[j], MAX_REPEATS[k], pairs, 20261210 + 100 * i + 10 * j + k)


def table(pairs: int, workers: int = 1) -> list[str]:
    jobs = [(i, j, k, pairs) for i in range(len(SCENARIOS)) for j in range(len(CVS)) for k in range(len(MAX_REPEATS))]
    if workers > 1:
        with ProcessPoolExecutor(workers) as ex:
            rows = list(ex.map(_row, jobs))
    else:
        rows = [_row(j) for j in jobs]
    out = [f"{pairs} seeded reproductions a row; true effect ×{TRUE_EFFECT} in the original; margin 50 % of the "
           f"effect the original found (±5 % where it found none); in the *D = ±margin* rows the margin is fixed at "
           f"{EDGE:.4f} on the log scale (half the true effect) and the true D sits exactly on it; α = {ALPHA}; one "
           "effect; looks after every 2 repeats per arm of the new run, O'Brien-Fleming-type spending; the fixed "
           "design is kit's fixed rule on every planned cell of the same reproductions.", "",
           "| new run | CV | max repeats/arm | inconsistent | reproduced | imprecise | mean repeats used | "
           "fixed: inconsistent | fixed: reproduced | fixed: imprecise |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        c, f = r.counts, r.fixed
        out.append(f"| {r.scenario} | {100 * r.cv:.0f} % | {r.repeats} | {r.pct(c['inconsistent']):.1f} % "
                   f"({c['inconsistent']}) | {r.pct(c['reproduced']):.1f} % ({c['reproduced']}) | "
                   f"{r.pct(c['imprecise']):.1f} % | {r.mean_repeats:.1f} | {r.pct(f['inconsistent']):.1f} % | "
                   f"{r.pct(f['reproduced']):.1f} % | {r.pct(f['imprecise']):.1f} % |")
    faithful = [r for r in rows if r.scenario.startswith("faithful")]
    bad = sum(r.counts["inconsistent"] for r in faithful)
    n = sum(r.pairs for r in faithful)
    edge = [r for r in rows if r.scenario.startswith("D = ")]
    wrong = sum(r.counts["reproduced"] for r in edge)
    m = sum(r.pairs for r in edge)
    out += ["", f"Pooled: false *inconsistent* for a faithful re-run {bad} of {n} ({100 * bad / n:.2f} %); false "
                f"*reproduced* with the true D on the margin {wrong} of {m} ({100 * wrong / m:.2f} %)."]
    return out


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.stats.sim_reproduce_until", description=__doc__.split("\n")[0])
    ap.add_argument("--write-table", type=Path, metavar="MD")
    ap.add_argument("--pairs", type=int, default=FULL)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args(argv)
    rows = table(args.pairs, args.workers)
    if args.write_table:
        replace_between(args.write_table, BEGIN, END, rows)
    else:
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
