"""Review 2: the blocked analysis (the default since summary schema 5) pools one residual variance over both arms,
so it loses the protection kit kept for Welch (Hsu's df with a failed cell): under a null of equal means where
one arm's cells vary more (the variant makes cells noisier, not slower), with one failed cell, its false-alarm
rate is about twice the nominal 5 % (measured 10.5 % of 4000 with the baseline's cells steady and the arm's 3x
as noisy; Welch on the same data 2.7 %).

Independent generator: ABBA order with a random start written here, log cell values normal, one cell of the noisy
arm dropped at random; kit's public model function ``kit.stats.model.blocked`` with blocks of two repeats, as
``kit.stats.ab.block_of`` assigns them.
"""

from __future__ import annotations

import numpy as np
import pytest

from kit.stats.model import blocked, welch

RUNS = 1500
ALPHA = 0.05
REPEATS = 4


def _experiment(rng: np.random.Generator, noisy: float) -> tuple[np.ndarray, list[int], np.ndarray, list[int]]:
    first = ["A", "B"]
    rng.shuffle(first)
    cells = [(a, r) for r in range(1, REPEATS + 1) for a in (first if r % 2 else first[::-1])]
    y: dict[str, list[float]] = {a: [] for a in "AB"}
    blocks: dict[str, list[int]] = {a: [] for a in "AB"}
    for a, r in cells:
        y[a].append(float(rng.normal(0.0, 0.1 * (noisy if a == "B" else 1.0))))
        blocks[a].append((r - 1) // 2)
    drop = int(rng.integers(REPEATS))  # one failed cell of the noisy arm
    yb = np.delete(np.array(y["B"]), drop)
    bb = [b for i, b in enumerate(blocks["B"]) if i != drop]
    return yb, bb, np.array(y["A"]), blocks["A"]


def _rate(method: str, noisy: float) -> float:
    rng = np.random.default_rng(20261203)
    hits = 0
    for _ in range(RUNS):
        arm, arm_blocks, base, base_blocks = _experiment(rng, noisy)
        w = blocked(arm, arm_blocks, base, base_blocks) if method == "blocked" else welch(arm, base)
        hits += int(w is not None and w.p <= ALPHA)
    return hits / RUNS


def _bound() -> float:
    return ALPHA + 2.5 * float(np.sqrt(ALPHA * (1 - ALPHA) / RUNS))


def test_welch_holds_the_level_under_unequal_variances_and_a_failed_cell() -> None:
    assert _rate("welch", 3.0) <= _bound()


@pytest.mark.xfail(strict=True, reason="review2: blocked pools the residual variance of both arms (no Welch/Hsu "
                   "protection): ~10 % false alarms at nominal 5 % with one arm 3x noisier and one failed cell")
def test_blocked_holds_the_level_under_unequal_variances_and_a_failed_cell() -> None:
    assert _rate("blocked", 3.0) <= _bound()
