"""The comparison model's pieces against textbook references: Welch's t, Holm's step-down, Fisher's exact test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from kit.stats.model import fisher_p, holm_levels, welch


def test_welch_matches_scipy_with_equal_counts() -> None:
    a, b = np.log([10.2, 10.9, 10.4, 11.0]), np.log([9.1, 9.8, 9.3, 9.0])
    w = welch(a, b)
    ref = sps.ttest_ind(a, b, equal_var=False)
    assert w is not None
    assert w.p == pytest.approx(ref.pvalue) and w.df == pytest.approx(ref.df)
    lo, hi = w.interval(0.05)
    assert (lo + hi) / 2 == pytest.approx(w.estimate)  # symmetric on the log scale
    assert hi - w.estimate == pytest.approx(sps.t.ppf(0.975, ref.df) * w.se)


def test_unequal_counts_use_hsu_df() -> None:
    w = welch(np.log([10.0, 10.5, 10.2]), np.log([9.0, 9.9]))
    assert w is not None and w.df == 1.0


def test_one_cell_is_no_test() -> None:
    assert welch(np.log([10.0]), np.log([9.0, 9.5])) is None


@pytest.mark.parametrize("p", [[0.001, 0.013, 0.04, 0.5], [0.01, 0.012, 0.02, 0.03], [0.2, 0.3], [0.001, 0.002]])
def test_holm_rejects_what_bonferroni_rejects_and_intervals_agree(p: list[float]) -> None:
    holm, tails = holm_levels(p, 0.05, "holm")
    bonf, _ = holm_levels(p, 0.05, "bonferroni")
    assert all(h or not b for h, b in zip(holm, bonf, strict=True))
    # an interval at its tail excludes the null exactly when its test is rejected
    assert [pi <= t for pi, t in zip(p, tails, strict=True)] == holm


def test_holm_step_down() -> None:
    assert holm_levels([0.01, 0.012, 0.02, 0.03], 0.05, "holm")[0] == [True, True, True, True]
    assert holm_levels([0.01, 0.012, 0.02, 0.03], 0.05, "bonferroni")[0] == [True, True, False, False]


def test_fisher() -> None:
    assert fisher_p(0, 100, 0, 100) is None
    assert fisher_p(15, 100, 0, 100) == pytest.approx(sps.fisher_exact([[15, 85], [0, 100]]).pvalue)
