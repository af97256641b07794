"""An independent generator of reproductions for kit reproduce's verdict (no kit code in the data it makes).

One reproduction: an original run and a new run of a two-arm experiment (baseline and a variant) at one level,
``repeats`` cells per arm in each. Each cell's statistic (its TPOT mean, say) is lognormal around the arm's true
value with between-cell coefficient of variation ``cv`` (log sd sqrt(log(1 + cv^2))), drawn with numpy. The
variant's true effect is ``TRUE_EFFECT`` (20 % faster) in the original; in the new run the scenario decides it, and
the new host may be slower (every latency of both arms times ``host``). Cells of repeats 1-2, 3-4, ... form one
ABBA block; with ``block_cv`` each block (in each run) shares a lognormal multiplier of both arms (drift). Whether
the original "found" its effect is decided here, by the original's own pre-registered test at alpha, written here
and not taken from kit: for ``method="welch"`` scipy's Welch t-test on the log cells; for ``"blocked"`` (kit's
default analysis.method) the least-squares block-fixed-effect estimate in closed form for this balanced design
(the mean of the per-block arm differences, residual df 2 * repeats - blocks - 1) and scipy's t.

Only then are the four groups of cells (and each cell's block) handed to kit's rule
(``kit.reproduce.decide.judge_effects``, the same ``decide`` `kit reproduce` applies to two summaries), which says
inconsistent, reproduced or imprecise.

``python -m tests.stats.sim_reproduce --write-table docs/reproduce.md`` runs every scenario x CV x repeats at
``FULL`` pairs each and rewrites the table between the markers; without ``--write-table`` it prints it.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

from kit.reproduce.decide import EffectCells, Rule, judge_effects

TRUE_EFFECT = 0.8  # the variant's ratio to the baseline in the original (20 % faster)
BASE_MS = 10.0
ALPHA = 0.05
RULE = Rule(effect_margin=0.5, absolute_margin=0.05, alpha=ALPHA)  # the manifest's defaults
CVS = (0.03, 0.10, 0.40)
REPEATS = (2, 4, 8)
FULL = 2000  # pairs per row of the table
START, END = "<!-- repro-sim:start -->", "<!-- repro-sim:end -->"
COMMAND = "python -m tests.stats.sim_reproduce --write-table docs/reproduce.md"


@dataclass(frozen=True)
class Scenario:
    name: str
    effect_power: float  # the new run's true effect is TRUE_EFFECT ** effect_power (1 faithful, 0.5 halved, ...)
    host: float = 1.0  # the new host's latencies relative to the original's (1.25: 25 % slower)

    @property
    def changed(self) -> bool:
        return self.effect_power != 1.0


SCENARIOS = (
    Scenario("faithful, same host", 1.0),
    Scenario("faithful, host 25 % slower", 1.0, 1.25),
    Scenario("effect halved", 0.5),
    Scenario("effect flipped", -1.0),
    Scenario("effect vanished", 0.0),
)


def _cells(rng: np.random.Generator, true_ms: float, cv: float, shape: tuple[int, int]) -> np.ndarray:
    sigma = math.sqrt(math.log1p(cv * cv))
    return np.log(true_ms * rng.lognormal(mean=-sigma * sigma / 2, sigma=sigma, size=shape))


def _drift(rng: np.random.Generator, block_cv: float, pairs: int, repeats: int) -> np.ndarray:
    """(pairs, repeats) log block multipliers, one per block of 2 repeats, shared by both arms of a run."""
    per_block = _cells(rng, 1.0, block_cv, (pairs, (repeats + 1) // 2)) if block_cv > 0 else \
        np.zeros((pairs, (repeats + 1) // 2))
    return np.repeat(per_block, 2, axis=1)[:, :repeats]


def blocked_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row, the two-sided p of the paired t on the per-repeat differences (each repeat's adjacent A B or B A is
    one pair, as kit's blocked analysis pairs them): estimate = mean of (arm - baseline), se = their SD / sqrt(k),
    Student's t with k - 1 df."""
    d = a - b
    k = d.shape[1]
    est = d.mean(axis=1)
    se = d.std(axis=1, ddof=1) / np.sqrt(k)
    with np.errstate(divide="ignore", invalid="ignore"):
        out: np.ndarray = 2 * sps.t.sf(np.abs(est) / se, k - 1)
    return out


def draw(rng: np.random.Generator, scenario: Scenario, cv: float, repeats: int, pairs: int,
         method: str = "blocked", block_cv: float = 0.0) -> list[EffectCells]:
    """``pairs`` reproductions' log cell statistics, and whether each original's own test (``method``) found its
    effect."""
    shape = (pairs, repeats)
    d_orig, d_new = _drift(rng, block_cv, pairs, repeats), _drift(rng, block_cv, pairs, repeats)
    oa = _cells(rng, BASE_MS * TRUE_EFFECT, cv, shape) + d_orig
    ob = _cells(rng, BASE_MS, cv, shape) + d_orig
    na = _cells(rng, BASE_MS * scenario.host * TRUE_EFFECT ** scenario.effect_power, cv, shape) + d_new
    nb = _cells(rng, BASE_MS * scenario.host, cv, shape) + d_new
    if method == "welch":
        found = sps.ttest_ind(oa, ob, axis=1, equal_var=False).pvalue < ALPHA
        return [EffectCells(oa[i], ob[i], na[i], nb[i], bool(found[i])) for i in range(pairs)]
    found = blocked_p(oa, ob) < ALPHA
    blocks = list(range(repeats))  # one repeat a block (kit.stats.ab.BLOCK_REPEATS = 1)
    both = (blocks, blocks)
    return [EffectCells(oa[i], ob[i], na[i], nb[i], bool(found[i]), both, both) for i in range(pairs)]


@dataclass(frozen=True)
class Rates:
    pairs: int
    inconsistent: int
    reproduced: int
    imprecise: int
    claimed: int  # the original found its effect

    def pct(self, n: int) -> float:
        return 100.0 * n / self.pairs


def rates(scenario: Scenario, cv: float, repeats: int, pairs: int, seed: int, method: str = "blocked",
          block_cv: float = 0.0) -> Rates:
    """``pairs`` seeded reproductions, each judged alone (one level, one effect: a family of one), both runs'
    effects under ``method`` (kit's default: blocked)."""
    rng = np.random.default_rng(seed)
    counts = {"inconsistent": 0, "reproduced": 0, "imprecise": 0}
    claimed = 0
    for e in draw(rng, scenario, cv, repeats, pairs, method, block_cv):
        claimed += e.claimed
        (d,) = judge_effects([e], RULE)
        counts["imprecise" if d is None else d.verdict] += 1
    return Rates(pairs, counts["inconsistent"], counts["reproduced"], counts["imprecise"], claimed)


def seed_of(i: int, j: int, k: int) -> int:
    return 20261202 + 100 * i + 10 * j + k


def table(pairs: int) -> list[str]:
    lines = [START, f"<!-- generated by `{COMMAND}`; do not edit by hand -->", "",
             f"{pairs} seeded reproductions per row; true effect ×{TRUE_EFFECT} (the variant 20 % faster) in the "
             "original; margin 50 % of the effect the original found (±5 % where it found none), α = 0.05; one "
             "level, so the family is one test. Both runs analysed as kit's default `analysis.method: blocked` "
             "(ABBA blocks of 2 repeats; each run's blocked effect and SE, D's df by Satterthwaite on the two); "
             "cells independent (no drift). *found*: the original's own blocked test found its effect.", "",
             "| new run | CV | repeats | inconsistent | reproduced | imprecise | found |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for i, sc in enumerate(SCENARIOS):
        for j, cv in enumerate(CVS):
            for k, reps in enumerate(REPEATS):
                r = rates(sc, cv, reps, pairs, seed_of(i, j, k))
                lines.append(f"| {sc.name} | {100 * cv:.0f} % | {reps} | {r.pct(r.inconsistent):.1f} % | "
                             f"{r.pct(r.reproduced):.1f} % | {r.pct(r.imprecise):.1f} % | {r.pct(r.claimed):.0f} % |")
    return [*lines, "", END]


def write_table(path: Path, block: list[str]) -> None:
    text = path.read_text()
    if START not in text or END not in text:
        raise SystemExit(f"{path}: no {START} ... {END} block to rewrite")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + "\n".join(block) + tail)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.stats.sim_reproduce", description=__doc__.split("\n")[0])
    ap.add_argument("--write-table", type=Path, metavar="MD", help="rewrite the block between the markers")
    ap.add_argument("--pairs", type=int, default=FULL, help=f"reproductions per row (default {FULL})")
    args = ap.parse_args(argv)
    block = table(args.pairs)
    if args.write_table:
        write_table(args.write_table, block)
    else:
        print("\n".join(block))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
