"""What a sequential design (``design.sequential``) promises before it runs: per primary comparison the power at an
effect under the spending boundaries, and the expected looks to the run's stop under that effect and under no
effect. The method: docs/statistics.md, "Planning a sequential design".

By simulation of the design and kit's own test, not the textbook z approximation (which is optimistic with the
few cells per arm of the first looks): per run, the log cell statistics of every arm at every level are normal
with the level's SD (the planned one: assumed, or a pilot's upper bound), the non-baseline arms shifted by the
effect; a look after each block of two repeats per arm tests each comparison with the pre-registered method
(Welch on the arms' cells, Welch-Satterthwaite df; blocked: the paired t on per-repeat differences, repeats - 1
df) against the boundary of ``kit.stats.sequential`` at the comparison's information fraction, at alpha/m for every
comparison (Holm's first step, as the fixed plan: conservative for Holm, which passes alpha on), with the
non-binding futility rule where the manifest has one. The run stops when every comparison is decided (efficacy
so far, or futility at the look) or at its last look (the maximum, or the last the time budget allows, which
spends all the alpha left). Seeded: the same plan prints the same figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kit.stats import lazy
from kit.stats.sequential import nominal_levels

RUNS = 4000  # simulated runs per scenario: a power's simulation error at most 0.8 points
SEED = 20261203


@dataclass(frozen=True)
class Outcome:
    """One scenario (an effect, or none) over RUNS simulated runs."""

    power: tuple[float, ...]  # per level: the share of runs whose comparison (each arm) was rejected
    looks: float  # mean looks to the run's stop
    decided: float  # the share of runs stopped because every comparison was decided (not at the last look)


def _stats(x_sum: np.ndarray, x_ss: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Means and sample variances from running sums (the last axis: repeats so far, n of them)."""
    mean = x_sum / n
    var = np.maximum(x_ss - n * mean**2, 0.0) / (n - 1)
    return mean, var


def simulate(sds: Sequence[float], effects: Sequence[float], arms: int, looks: int, most_looks: int, tail: float,
             spending: str, method: str, futility: tuple[float, float] | None, *, runs: int = RUNS,
             seed: int = SEED) -> Outcome:
    """``sds`` and ``effects`` (log) per level, ``arms`` non-baseline arms, at most ``looks`` looks of
    ``most_looks`` (the fraction of look k is k / most_looks; the last spends all the alpha left); ``futility``:
    (margin as a fraction, confidence) or None."""
    sps = lazy.stats()
    rng = np.random.default_rng(seed)
    sd = np.asarray(sds, dtype=np.float64)[None, :, None]
    shift = np.asarray(effects, dtype=np.float64)[None, :, None]
    levels = sd.shape[1]
    nominal = nominal_levels([(k + 1) / most_looks for k in range(looks)], tail, spending, final=True)
    shape = (runs, levels, arms)
    s_a, ss_a, s_b, ss_b, s_d, ss_d = (np.zeros(shape) for _ in range(6))
    rejected = np.zeros(shape, dtype=bool)
    stopped = np.zeros(runs, dtype=bool)
    stop_look = np.full(runs, float(looks))
    early = np.zeros(runs, dtype=bool)
    power = np.zeros(shape, dtype=bool)
    for k in range(looks):
        for _ in range(2):  # one block: two repeats of every arm
            base = rng.normal(0.0, 1.0, (runs, levels, 1)) * sd
            arm = rng.normal(0.0, 1.0, shape) * sd + shift
            s_a += arm
            ss_a += arm**2
            s_b += base
            ss_b += base**2
            s_d += arm - base
            ss_d += (arm - base) ** 2
        n = 2 * (k + 1)
        if method == "blocked":
            est, var = _stats(s_d, ss_d, n)
            se, df = np.sqrt(var / n), np.full(shape, float(n - 1))
        else:
            ma, va = _stats(s_a, ss_a, n)
            mb, vb = _stats(s_b, ss_b, n)
            est, wa, wb = ma - mb, va / n, vb / n
            se = np.sqrt(wa + wb)
            with np.errstate(divide="ignore", invalid="ignore"):
                df = np.where(se > 0, (wa + wb) ** 2 / (wa**2 / (n - 1) + wb**2 / (n - 1)), float(n - 1))
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, np.abs(est) / se, np.inf)
        rejected |= 2 * sps.t.sf(t, df) <= nominal[k]
        decided = rejected.copy()
        if futility is not None:
            margin, conf = futility
            half = sps.t.ppf(1 - (1 - conf) / 2, df) * se
            decided |= np.abs(est) + half < math.log1p(margin)
        now = ~stopped & (decided.all(axis=(1, 2)) | (k == looks - 1))
        early |= now & decided.all(axis=(1, 2))
        stop_look[now] = k + 1
        power[now] = rejected[now]
        stopped |= now
        if stopped.all():
            break
    return Outcome(tuple(float(x) for x in power.mean(axis=(0, 2))), float(stop_look.mean()), float(early.mean()))


def budget_looks(blocks: int, block_minutes: float, max_minutes: float | None) -> int:
    """The last look a time budget allows when every block takes ``block_minutes`` (the run's rule: no block
    starts that would end past the budget; at least the first)."""
    if max_minutes is None or block_minutes <= 0:
        return blocks
    return max(1, min(blocks, math.floor(max_minutes / block_minutes + 1e-9)))
