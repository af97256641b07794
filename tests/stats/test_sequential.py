"""kit.stats.sequential against numbers we did not compute: published Lan-DeMets boundaries (the values gsDesign's
sfLDOF / sfLDPocock and rpact's asOF / asP print for one-sided alpha 0.025, equally spaced looks, which a
symmetric two-sided 0.05 design reproduces to 1e-4), scipy's multivariate normal for the crossing probability,
and the manifest's refusal of a design without blocks."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal, norm

from kit.errors import KitError
from kit.manifest import load_manifest
from kit.stats.sequential import Hypothesis, boundaries, holm_sequential, nominal_levels, spent

ROOT = Path(__file__).resolve().parents[2]
# gsDesign(k=K, test.type=1, alpha=0.025, sfu=sfLDOF or sfLDPocock)$upper$bound, equally spaced looks
OBF_5 = [4.8769, 3.3569, 2.6803, 2.2898, 2.0310]
OBF_3 = [3.7103, 2.5114, 1.9930]
OBF_2 = [2.9626, 1.9686]
POCOCK_5 = [2.4380, 2.4268, 2.4101, 2.3966, 2.3859]


@pytest.mark.parametrize(("k", "spending", "published"), [(5, "obrien-fleming", OBF_5), (3, "obrien-fleming", OBF_3),
                                                          (2, "obrien-fleming", OBF_2), (5, "pocock", POCOCK_5)])
def test_boundaries_match_the_published_lan_demets_values(k: int, spending: str, published: list[float]) -> None:
    got = boundaries([(j + 1) / k for j in range(k)], 0.05, spending)
    assert got == pytest.approx(published, abs=2e-3)


def _crossing(bounds: list[float], fractions: list[float]) -> float:
    """P(|Z_j| >= c_j for some j) under H0 from scipy's multivariate normal (corr sqrt(t_i / t_j))."""
    k = len(bounds)
    cov = np.array([[math.sqrt(min(a, b) / max(a, b)) for b in fractions] for a in fractions])
    c = np.array(bounds)
    return 1 - float(multivariate_normal(mean=np.zeros(k), cov=cov).cdf(c, lower_limit=-c))


@pytest.mark.parametrize("fractions", [[0.25, 0.6, 1.0], [0.2, 0.45, 0.7, 1.0], [0.3, 0.5]])
def test_the_boundaries_spend_exactly_alpha_unequal_looks_included(fractions: list[float]) -> None:
    for spending in ("obrien-fleming", "pocock"):
        b = boundaries(fractions, 0.05, spending, final=True)
        assert _crossing(b, fractions) == pytest.approx(0.05, abs=5e-4)
        first = 2 * norm.sf(b[0])  # the first look spends exactly what the function says
        assert first == pytest.approx(spent(fractions[0], 0.05, spending), rel=1e-3)


def test_spending_functions_and_final_look() -> None:
    assert spent(1.0, 0.05, "obrien-fleming") == 0.05 and spent(0.0, 0.05, "pocock") == 0.0
    assert spent(0.5, 0.05, "pocock") == pytest.approx(0.05 * math.log(1 + (math.e - 1) / 2))
    # a look cut short by the budget (t = 0.6) spends all that is left: its boundary is lower than as an interim
    interim = boundaries([1 / 3, 0.6], 0.05)[-1]
    last = boundaries([1 / 3, 0.6], 0.05, final=True)[-1]
    assert last < interim and _crossing(boundaries([1 / 3, 0.6], 0.05, final=True), [1 / 3, 0.6]) == \
        pytest.approx(0.05, abs=5e-4)
    assert nominal_levels([1e-9 + 0.01, 1.0], 0.05)[0] < 1e-12  # nothing to spend that early
    with pytest.raises(ValueError, match="increase strictly"):
        boundaries([0.5, 0.5], 0.05)


def test_holm_passes_alpha_on_after_a_rejection() -> None:
    fr = (0.5, 1.0)
    # alone at alpha/2 the second (p=0.03 at the end) is not rejected; once the first is, it gets all of alpha
    strong = Hypothesis(fr, (1e-6, 1e-6))
    weak = Hypothesis(fr, (0.5, 0.03))
    d = holm_sequential([strong, weak], 0.05, final=True)
    assert d[0].rejected_at == 0 and d[1].rejected_at == 1 and d[1].level == 0.05
    alone = holm_sequential([Hypothesis(fr, (0.5, 0.5)), weak], 0.05, final=True)
    assert alone[1].rejected_at is None and alone[1].level == 0.025
    # an interim look (not final) cannot reject at the fixed design's level
    assert holm_sequential([Hypothesis((0.5,), (0.01,))], 0.05)[0].rejected_at is None


def test_a_sequential_design_needs_blocks(tmp_path: Path) -> None:
    text = (ROOT / "experiments" / "demo-levels.yaml").read_text().replace("order: abba", "order: interleaved")
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(KitError, match=r"design\.sequential looks after each block"):
        load_manifest(path)


def _crossing_one_sided(bounds: list[float], fractions: list[float]) -> float:
    """P(Z_j >= c_j for some j) under H0 from scipy's multivariate normal (corr sqrt(t_i / t_j))."""
    k = len(bounds)
    cov = np.array([[math.sqrt(min(a, b) / max(a, b)) for b in fractions] for a in fractions])
    c = np.array([b if math.isfinite(b) else 40.0 for b in bounds])
    return 1 - float(multivariate_normal(mean=np.zeros(k), cov=cov).cdf(c, lower_limit=np.full(k, -np.inf)))


@pytest.mark.parametrize(("k", "spending", "published"), [(5, "obrien-fleming", OBF_5), (3, "obrien-fleming", OBF_3),
                                                          (2, "obrien-fleming", OBF_2), (5, "pocock", POCOCK_5)])
def test_one_sided_boundaries_match_the_published_one_sided_values(k: int, spending: str,
                                                                   published: list[float]) -> None:
    """gsDesign's test.type=1 values at one-sided 0.025 are one-sided designs: computed here by the one-sided
    recursion (continuation region Z < c), not the symmetric two-sided one."""
    got = boundaries([(j + 1) / k for j in range(k)], 0.025, spending, sides=1)
    assert got == pytest.approx(published, abs=2e-3)


@pytest.mark.parametrize("fractions", [[0.25, 0.6, 1.0], [0.2, 0.45, 0.7, 1.0], [0.4, 0.7, 0.85, 1.0], [0.5, 1.0]])
@pytest.mark.parametrize("spending", ["obrien-fleming", "pocock"])
def test_one_sided_boundaries_spend_exactly_alpha(fractions: list[float], spending: str) -> None:
    b = boundaries(fractions, 0.05, spending, final=True, sides=1)
    assert _crossing_one_sided(b, fractions) == pytest.approx(0.05, abs=5e-4)
    assert norm.sf(b[0]) == pytest.approx(spent(fractions[0], 0.05, spending, sides=1), rel=1e-3)
    # a two-sided design at 2 alpha is nearly the same (a path crossing its far side is that rare): within 1e-3 in z
    assert b == pytest.approx(boundaries(fractions, 0.10, spending, final=True), abs=1e-3)
    levels = nominal_levels(fractions, 0.05, spending, final=True, sides=1)
    assert levels == pytest.approx([float(norm.sf(c)) for c in b])
