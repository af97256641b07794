"""The comparison model's pieces against textbook references: Welch's t, Holm's step-down, Fisher's exact test."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from kit.stats import reduce_records
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


def test_timeouts_are_counted_and_censored_at_the_timeout() -> None:
    ok = {"status": 200, "error": None, "ttft_ns": 10_000_000, "chunk_ns": [10_000_000, 20_000_000],
          "e2e_ns": 21_000_000, "usage_completion_tokens": 2, "client_tokens": 2, "wall_start": 1.0}
    timed_out = {"status": 200, "error": "timeout after 0.1 s", "ttft_ns": 30_000_000, "chunk_ns": [30_000_000],
                 "e2e_ns": 100_000_000, "usage_completion_tokens": None, "client_tokens": 1, "wall_start": 1.0}
    no_chunk = {**timed_out, "status": None, "ttft_ns": None, "chunk_ns": [], "client_tokens": 0}
    http = {"status": 500, "error": "http 500", "ttft_ns": None, "chunk_ns": [], "e2e_ns": 1_000_000,
            "wall_start": 1.0}
    lr = reduce_records([ok, timed_out, no_chunk, http])
    assert (lr.requests, lr.ok, lr.errors, lr.censored) == (4, 1, 3, 2)
    assert lr.output_tokens == 2  # ok requests only
    assert lr.column(0).tolist() == [10.0, 30.0, 100.0]  # TTFT: ok, first chunk, censored at the timeout
    assert lr.column(1).tolist() == [21.0, 100.0, 100.0]  # E2E censored at the timeout; the HTTP error has none
