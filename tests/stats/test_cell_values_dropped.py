"""A cell whose statistic has no log must not be silently left out of the A/B test (review 2: the cells left were
the arm's best, survivorship bias). Rates are floored at half a count (kit.stats.cellstat.rate_floor), the geometric
mean at the clock resolution.

- goodput / SLO attainment: a cell where no request met the SLO has goodput 0; ``np.log(0) = -inf`` is filtered as
  "not finite" by the model, so an arm that meets the SLO in half its cells and misses it entirely in the other
  half is compared on its good half only and comes out *no different* from a baseline that always meets it.
- geomean of ITL: a gap of 0 ms (two chunks read at the same instant) makes the cell's geometric mean NaN and the
  whole cell is dropped.

Independent reference: the goodput computed here by arithmetic over the same requests.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kit.stats.ab import run_test
from kit.stats.bootstrap import CellSample
from kit.stats.cellstat import CellRule, Slo, cell_value
from kit.stats.metrics import C_E2E, C_ITL_N, C_ITL_SUM, C_ONE, C_TOKENS, C_TPOT, C_TPOT_OK, C_TTFT, GOODPUT, N_COLS

SLO = CellRule(slo=Slo(e2e_ms=1000.0))


def _cell(cid: str, repeat: int, e2e_ms: float, n: int = 20, wall_s: float = 10.0) -> CellSample:
    m = np.zeros((n, N_COLS))
    m[:, C_TTFT], m[:, C_E2E], m[:, C_TPOT], m[:, C_TPOT_OK] = 50.0, e2e_ms, 10.0, 1.0
    m[:, C_ITL_SUM], m[:, C_ITL_N], m[:, C_TOKENS], m[:, C_ONE] = 10.0 * 15, 15, 16, 1.0
    return CellSample(cid, m, 100.0, repeat=repeat, requests=n, wall_s=wall_s)


@pytest.mark.parametrize("method", ["blocked", "welch"])
def test_a_cell_with_no_good_request_counts(method: str) -> None:
    base = [_cell(f"b-r{r}", r, 500.0 + r) for r in range(1, 7)]
    arm = [_cell(f"a-r{r}", r, 500.0 + r if r % 2 else 5000.0) for r in range(1, 7)]  # half the cells miss the SLO
    # the independent figure: the arm's pooled goodput is half the baseline's
    good = sum(sum(1 for v in c.matrix[:, C_E2E] if v <= 1000.0) for c in arm) / sum(c.wall_s or 0 for c in arm)
    assert good == pytest.approx(0.5 * sum(c.matrix.shape[0] for c in base) / 60.0)
    w = run_test(arm, base, GOODPUT, SLO, method)
    assert w is not None
    assert w.k_arm == 6, f"kit compared {w.k_arm} of the arm's 6 cells"
    assert w.estimate < math.log(0.9)
    # the floor: half a good request over the cell's 10 s; the independent figure of the arm's mean log
    expected = (3 * math.log(20 / 10.0) + 3 * math.log(0.5 / 10.0)) / 6 - math.log(20 / 10.0)
    assert w.estimate == pytest.approx(expected, rel=1e-9)


def test_a_cell_with_no_good_request_counts_for_attainment() -> None:
    from kit.stats.metrics import ATTAINMENT

    base = [_cell(f"b-r{r}", r, 500.0) for r in range(1, 5)]
    arm = [_cell(f"a-r{r}", r, 500.0 if r % 2 else 5000.0) for r in range(1, 5)]
    w = run_test(arm, base, ATTAINMENT, SLO, "welch")
    assert w is not None and w.k_arm == 4
    assert w.estimate == pytest.approx((2 * math.log(1.0) + 2 * math.log(0.5 / 20)) / 4, rel=1e-9)


def test_geomean_itl_keeps_a_cell_with_a_zero_gap() -> None:
    from kit.stats.metrics import TESTED

    itl = next(m for m in TESTED if m.key == "itl_mean_ms")
    c = _cell("a-r1", 1, 500.0)
    gaps = np.full(300, 10.0)
    gaps[7] = 0.0
    c = CellSample(c.cell_id, c.matrix, c.tok_s, repeat=1, requests=20, wall_s=10.0, gaps=gaps)
    got = cell_value(c, itl, CellRule(statistic="geomean"))
    # the independent figure: the 0 gap taken at the clock's 1 ns (1e-6 ms)
    assert got == pytest.approx(math.exp((299 * math.log(10.0) + math.log(1e-6)) / 300), rel=1e-12)
