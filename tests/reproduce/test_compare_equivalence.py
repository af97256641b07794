"""`kit compare A B` judges B against A with kit reproduce's rule: two signed bundles of simulated records (the same
seed: identical figures) reproduce; a variant 30 % slower is inconsistent (its arm's shift a fact, judged only with
same_hardware); the margins come from --margin/--absolute-margin or A's manifest; --strict exits as kit reproduce
does; a bundle file that fails the read policy is exit 9. One shift and one effect are recomputed with scipy from
the two summary.json files alone."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from reproduce_helpers import signed
from scipy import stats as sps
from support.bundles import ArmModel

from kit.cli import main
from kit.compare import compare_bundles
from kit.errors import ExitCode
from kit.signing import generate_key


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A, an identical re-run of it, and one whose oea arm is 30 % slower (the base arm identical)."""
    tmp = tmp_path_factory.mktemp("compare")
    key = generate_key(tmp / "keys" / "runner_ed25519", "kit-runner@testhost")
    return {"a": signed(tmp / "a", key).root, "same": signed(tmp / "same", key).root,
            "slower": signed(tmp / "slower", key, arms={"base": ArmModel(), "oea": ArmModel(itl_factor=1.3)}).root}


def _kit(*args: object) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["compare", *map(str, args)])
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r.exit_code, r.output


def test_an_identical_rerun_is_reproduced(bundles: dict[str, Path]) -> None:
    eq = compare_bundles(bundles["a"], bundles["same"])["equivalence"]
    assert eq.verdict == "reproduced" and eq.counts == {"reproduced": 2, "inconsistent": 0, "imprecise": 0}
    assert eq.margin == 0.05 and eq.effect_margin == 0.5 and eq.margin_from == "A's manifest (analysis.reproduce)"
    assert eq.conclusion_held is True and all(c.held for c in eq.conclusions)
    code, out = _kit(bundles["a"], bundles["same"], "--strict")
    assert code == 0, out
    assert ("margin 50 % of each effect the original found, ±5 % where it found none, from A's manifest "
            "(analysis.reproduce)") in out
    assert out.rstrip().splitlines()[-1].startswith("verdict: REPRODUCED: all 2 judged comparisons of tpot_mean_ms")


def test_a_30_percent_slower_variant_is_inconsistent(bundles: dict[str, Path]) -> None:
    eq = compare_bundles(bundles["a"], bundles["slower"])["equivalence"]
    verdicts = {(c.kind, c.arm, c.level): c.verdict for c in eq.comparisons}
    assert verdicts == {("arm", "base", 1): None, ("arm", "base", 4): None,  # the arms' shifts: facts
                        ("arm", "oea", 1): None, ("arm", "oea", 4): None,
                        ("effect", "oea", 1): "inconsistent", ("effect", "oea", 4): "inconsistent"}
    assert eq.verdict == "inconsistent" and eq.conclusion_held is False
    code, out = _kit(bundles["a"], bundles["slower"])
    assert code == 0, out  # without --strict compare only reports
    assert "INCONSISTENT  oea vs base c=1: TPOT mean effect" in out and "; +29.9 %): INCONSISTENT" in out
    assert "oea c=4: DID NOT HOLD: significant only in the new run" in out
    assert "verdict: INCONSISTENT: 2 of 2 judged comparisons" in out and "between the machines (not judged)" in out
    code, out = _kit(bundles["a"], bundles["slower"], "--strict")
    assert code == ExitCode.NOT_REPRODUCED and "B against A: verdict: INCONSISTENT" in out, out


def test_json_carries_the_verdicts(bundles: dict[str, Path]) -> None:
    code, out = _kit(bundles["a"], bundles["slower"], "--json", "--absolute-margin", "10%")
    assert code == 0, out
    doc = json.loads(out)
    eq = doc["equivalence"]
    assert eq["verdict"] == "inconsistent" and eq["margin"] == pytest.approx(0.1)
    assert eq["margin_from"] == "--absolute-margin, else A's manifest (analysis.reproduce)"
    oea = next(c for c in eq["comparisons"] if c["kind"] == "arm" and c["arm"] == "oea" and c["level"] == 4)
    assert oea["status"] == "shift" and oea["verdict"] is None and oea["ratio"] == pytest.approx(1.3, rel=0.02)
    assert [c["held"] for c in eq["conclusions"]] == [False, False]
    assert {s["what"] for s in doc["setup"]} >= {"manifest.yaml sha256", "plan (cells, order, levels)", "kit version"}


def test_same_hardware_judges_the_arms_and_strict_says_imprecise(bundles: dict[str, Path]) -> None:
    # A's manifest pre-registers same_hardware: the 30 % slower arm itself is inconsistent, the base reproduced
    hw = bundles["a"].parent.parent / "hw" / bundles["a"].name
    hw.parent.mkdir()
    shutil.copytree(bundles["a"], hw)
    (hw / "manifest.yaml").write_text((hw / "manifest.yaml").read_text() + "  reproduce:\n    same_hardware: true\n")
    eq = compare_bundles(hw, bundles["slower"])["equivalence"]
    verdicts = {(c.kind, c.arm, c.level): c.verdict for c in eq.comparisons}
    assert verdicts[("arm", "base", 1)] == "reproduced" and verdicts[("arm", "oea", 1)] == "inconsistent"
    assert eq.same_hardware and eq.counts["inconsistent"] == 4
    # identical figures, but a 0.5 % margin is narrower than the intervals: imprecise, with repeats advice
    code, out = _kit(bundles["a"], bundles["same"], "--absolute-margin", "0.5%", "--strict")
    assert code == ExitCode.INCONCLUSIVE and "would show equivalence with 80 % power if nothing changed" in out, out


@pytest.mark.parametrize("name,content", [("summary.json", "[" * 100_000), ("summary.json", '{"arms": 1}'),
                                          ("manifest.yaml", "name: [unclosed\n"), ("environment.json", "\xff")])
def test_a_bundle_that_fails_the_read_policy_is_exit_9(bundles: dict[str, Path], tmp_path: Path, name: str,
                                                       content: str) -> None:
    bad = tmp_path / "bad"
    shutil.copytree(bundles["same"], bad)
    (bad / name).write_bytes(content.encode("latin-1"))
    for args in ((bundles["a"], bad), (bad, bundles["a"])) if name != "manifest.yaml" else ((bad, bundles["a"]),):
        code, out = _kit(*args, "--strict")
        assert code == ExitCode.BUNDLE_INVALID and name in out, out


def _cells(root: Path, arm: str, level: int) -> list[dict]:  # type: ignore[type-arg]
    doc = json.loads((root / "summary.json").read_text())
    return [c for c in doc["cells"]
            if c["arm"] == arm and c["included"] and c["levels"].get(str(level), {}).get("ok", 0) > 0]


def _log_cells(root: Path, arm: str, level: int) -> np.ndarray:
    """Each included cell's TPOT cell statistic at ``level`` (the mean: the manifest's default), read from
    summary.json as plain JSON (not through kit)."""
    return np.log([c["levels"][str(level)]["cell_values"]["tpot_mean_ms"] for c in _cells(root, arm, level)])


def _welch_by_hand(root: Path, level: int) -> tuple[float, float, float]:
    """The oea effect by Welch's t on the log cell statistics (the default for these 3-repeat bundles: the paired
    t needs 6, kit.stats.summary.BLOCKED_MIN_REPEATS), from scipy on the cells read as plain JSON: (estimate, SE,
    Welch-Satterthwaite df)."""
    a, b = _log_cells(root, "oea", level), _log_cells(root, "base", level)
    res = sps.ttest_ind(a, b, equal_var=False)
    return float(a.mean() - b.mean()), math.sqrt(a.var(ddof=1) / a.size + b.var(ddof=1) / b.size), float(res.df)


@pytest.mark.parametrize("other", ["slower", "same"])
def test_one_shift_and_one_effect_against_scipy(bundles: dict[str, Path], other: str) -> None:
    """The arm's shift: scipy's Welch test on the log cell means (its p, df, and the 95 % interval); TOST against
    ±log(1.05) by hand. The effect: the four groups' difference of differences, its variance and Satterthwaite df
    written out (each run's effect by Welch's t, the default analysis.method at 3 repeats), and
    its p of no difference from scipy's t."""
    new, orig = _log_cells(bundles[other], "oea", 4), _log_cells(bundles["a"], "oea", 4)
    res = sps.ttest_ind(new, orig, equal_var=False)
    d = float(new.mean() - orig.mean())
    se = math.sqrt(new.var(ddof=1) / new.size + orig.var(ddof=1) / orig.size)
    df, delta = float(res.df), math.log(1.05)
    half = sps.t.ppf(0.975, df) * se
    p_eq = max(sps.t.sf((d + delta) / se, df), sps.t.cdf((d - delta) / se, df))
    eq = compare_bundles(bundles["a"], bundles[other])["equivalence"]
    c = next(c for c in eq.comparisons if c.kind == "arm" and c.arm == "oea" and c.level == 4)
    assert c.ratio == pytest.approx(math.exp(d), rel=1e-9) and c.df == pytest.approx(df, rel=1e-6)
    assert c.ratio_ci is not None and c.ratio_ci.low == pytest.approx(math.exp(d - half), rel=1e-6)
    assert c.ratio_ci.high == pytest.approx(math.exp(d + half), rel=1e-6)
    assert c.p_zero == pytest.approx(res.pvalue, rel=1e-6, abs=1e-12)
    assert c.p_equivalent == pytest.approx(p_eq, rel=1e-6, abs=1e-12) and c.verdict is None

    (en, sn, dfn), (eo, so, dfo) = (_welch_by_hand(bundles[run], 4) for run in (other, "a"))
    dd, var = en - eo, sn**2 + so**2  # each run's effect by its default test; Satterthwaite on the two SEs
    df2 = var**2 / (sn**4 / dfn + so**4 / dfo)
    p0 = 2 * sps.t.sf(abs(dd) / math.sqrt(var), df2)
    e = next(c for c in eq.comparisons if c.kind == "effect" and c.level == 4)
    assert e.log_estimate == pytest.approx(dd, rel=1e-9) and e.p_zero == pytest.approx(p0, rel=1e-6, abs=1e-12)
    assert e.verdict == ("inconsistent" if other == "slower" else "reproduced")


def test_runs_summarized_under_different_cell_statistics_are_not_judged(bundles: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    """B's summary says its cells hold the geometric mean, A's the mean: B cannot be judged under A's analysis;
    exit 2 with both statistics named, never a verdict (kit compare reads the summaries as they claim)."""
    geo = tmp_path / "geo"
    shutil.copytree(bundles["same"], geo)
    doc = json.loads((geo / "summary.json").read_text())
    doc["analysis"]["cell_statistic"] = "geomean"
    (geo / "summary.json").write_text(json.dumps(doc))
    code, out = _kit(bundles["a"], geo, "--strict")
    assert code == ExitCode.USAGE, out
    assert "the runs' cell statistics differ (original: mean; new: geomean)" in out and "Hint:" in out
