"""How kit reproduce's fixed-sample verdict behaves when the original and the reproduction are both sequential runs
that stopped on their own A/B looks (what `kit reproduce` of a sequential original does: docs/reproduce.md,
"Sequential originals"). Its own generator (numpy lognormal cells as tests/stats/sim_reproduce.py draws them) and
its own paired t (scipy's t); each run stops at the first look whose p crosses kit's spending boundary (one
comparison, alpha 0.05) or at its maximum, and keeps only the cells of its blocks so far; then the two runs' cells
go to kit's rule (``judge_effects``), the original's claim being its own sequential rejection.

``python -m tests.stats.sim_reproduce_sequential`` prints the table of docs/reproduce.md, "Sequential originals".
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from kit.reproduce.decide import EffectCells, judge_effects
from kit.stats.sequential import nominal_levels
from tests.stats.sim_reproduce import ALPHA, BASE_MS, RULE, TRUE_EFFECT, _cells


def _stop(arm: np.ndarray, base: np.ndarray, nominal: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the repeats each run used (its stopping look x 2) and whether it rejected (paired t)."""
    rows, looks = arm.shape[0], len(nominal)
    used = np.full(rows, 2 * looks)
    found = np.zeros(rows, dtype=bool)
    done = np.zeros(rows, dtype=bool)
    for k in range(looks):
        n = 2 * (k + 1)
        d = arm[:, :n] - base[:, :n]
        with np.errstate(divide="ignore", invalid="ignore"):
            p = 2 * sps.t.sf(np.abs(d.mean(axis=1)) / (d.std(axis=1, ddof=1) / math.sqrt(n)), n - 1)
        now = ~done & ((p <= nominal[k]) | (k == looks - 1))
        found[now] = (p <= nominal[k])[now]
        used[now] = n
        done |= now
    return used, found


def rates(cv: float, repeats: int, pairs: int, seed: int, *, sequential: bool, effect_power: float = 1.0,
          spending: str = "obrien-fleming") -> dict[str, float]:
    """Verdict shares of ``pairs`` reproductions (faithful: ``effect_power`` 1), and the mean repeats used."""
    rng = np.random.default_rng(seed)
    shape = (pairs, repeats)
    oa, ob = _cells(rng, BASE_MS * TRUE_EFFECT, cv, shape), _cells(rng, BASE_MS, cv, shape)
    na, nb = _cells(rng, BASE_MS * TRUE_EFFECT ** effect_power, cv, shape), _cells(rng, BASE_MS, cv, shape)
    looks = repeats // 2
    nominal = nominal_levels([(k + 1) / looks for k in range(looks)], ALPHA, spending, final=True) if sequential \
        else [0.0] * (looks - 1) + [ALPHA]
    uo, fo = _stop(oa, ob, nominal)
    un, _ = _stop(na, nb, nominal)
    counts = {"inconsistent": 0, "reproduced": 0, "imprecise": 0}
    for i in range(pairs):
        bo, bn = list(range(int(uo[i]))), list(range(int(un[i])))
        e = EffectCells(oa[i, : uo[i]], ob[i, : uo[i]], na[i, : un[i]], nb[i, : un[i]], bool(fo[i]), (bo, bo),
                        (bn, bn))
        (d,) = judge_effects([e], RULE)
        counts["imprecise" if d is None else d.verdict] += 1
    return {**{k: v / pairs for k, v in counts.items()}, "repeats": float((uo.mean() + un.mean()) / 2),
            "found": float(fo.mean())}


def table_rows(pairs: int = 4000) -> list[str]:
    rows = ["| design | CV | max repeats/arm | inconsistent (faithful) | reproduced (faithful) | mean repeats used | "
            "inconsistent (effect vanished) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for cv in (0.03, 0.10):
        for repeats in (8, 16):
            for sequential in (False, True):
                r = rates(cv, repeats, pairs, 7, sequential=sequential)
                v = rates(cv, repeats, pairs, 8, sequential=sequential, effect_power=0.0)
                name = "sequential (O'Brien-Fleming-type), both runs" if sequential else "fixed, both runs"
                rows.append(f"| {name} | {100 * cv:.0f} % | {repeats} | {100 * r['inconsistent']:.1f} % | "
                            f"{100 * r['reproduced']:.1f} % | {r['repeats']:.1f} | {100 * v['inconsistent']:.1f} % |")
    return rows


if __name__ == "__main__":
    print("\n".join(table_rows()))
