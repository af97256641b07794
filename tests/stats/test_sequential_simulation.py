"""The sequential design's error and saving, by the independent simulation of tests/stats/sim_sequential.py (its
own generator and scipy's Welch test; kit's holm_sequential decides): the A/A family-wise error stays at or below
5 % (O'Brien-Fleming- and Pocock-type, CV 10 % and 40 %), and at CV 10 % the sequential design uses fewer cells
than the fixed design of equal power. The full table (docs/statistics.md): KIT_SIM_TIER=full or
`python -m tests.stats.sim_sequential --write-table docs/statistics.md`."""

from __future__ import annotations

import math
import os

import pytest

from tests.stats.sim_sequential import Design, equal_power_cells, simulate, table_rows

RUNS = 2000
SLACK = 2 * math.sqrt(0.05 * 0.95 / RUNS)  # two standard errors of a 5 % rate over RUNS experiments


@pytest.mark.parametrize(("cv", "spending"), [(0.10, "obrien-fleming"), (0.40, "obrien-fleming"), (0.10, "pocock")])
def test_sequential_aa_family_wise_error_at_most_5_percent(cv: float, spending: str) -> None:
    got = simulate(Design(cv=cv, max_repeats=8, levels=2, effect=1.0, spending=spending), RUNS, seed=11)
    assert got["any_rejection"] <= 0.05 + SLACK, got


def test_sequential_saves_cells_against_the_fixed_design_of_equal_power_at_cv_10_percent() -> None:
    d = Design(cv=0.10, max_repeats=24, levels=2, effect=0.90)
    seq = simulate(d, 1000, seed=2)
    fixed = equal_power_cells(d, seq["power"], 1000)
    assert seq["power"] > 0.8 and seq["cells"] < 0.9 * fixed, (seq, fixed)  # measured: 36 v 45 cells (-21 %)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("KIT_SIM_TIER") != "full", reason="the full table: KIT_SIM_TIER=full")
def test_the_full_table() -> None:
    rows = table_rows()
    print("\n".join(rows))
    for row in rows[2:]:
        assert float(row.split("|")[4].strip().rstrip("%").strip()) <= 100 * (0.05 + SLACK)
