"""`kit compare A B` judges B against A with kit reproduce's equivalence machinery: two signed bundles of simulated
records (the same seed: identical figures) reproduce; one arm 30 % slower does not; the margin comes from --margin or
A's manifest; --strict exits as kit reproduce does; a bundle file that fails the read policy is exit 9. One decision
is recomputed with scipy from the two summary.json files alone."""

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
    assert eq.verdict == "reproduced" and eq.counts == {"reproduced": 6, "not_reproduced": 0, "inconclusive": 0}
    assert eq.margin == 0.05 and eq.margin_from == "A's manifest (analysis.reproduce_margin)"
    assert eq.conclusion_held is True and all(c.held for c in eq.conclusions)
    code, out = _kit(bundles["a"], bundles["same"], "--strict")
    assert code == 0, out
    assert "margin ±5 % from A's manifest (analysis.reproduce_margin)" in out
    assert out.rstrip().splitlines()[-1].startswith("verdict: REPRODUCED: all 6 comparisons of tpot_mean_ms")


def test_a_30_percent_slower_arm_is_not_reproduced(bundles: dict[str, Path]) -> None:
    eq = compare_bundles(bundles["a"], bundles["slower"])["equivalence"]
    verdicts = {(c.kind, c.arm, c.level): c.verdict for c in eq.comparisons}
    assert verdicts == {("arm", "base", 1): "reproduced", ("arm", "base", 4): "reproduced",
                        ("arm", "oea", 1): "not_reproduced", ("arm", "oea", 4): "not_reproduced",
                        ("effect", "oea", 1): "not_reproduced", ("effect", "oea", 4): "not_reproduced"}
    assert eq.verdict == "not_reproduced" and eq.conclusion_held is False
    code, out = _kit(bundles["a"], bundles["slower"])
    assert code == 0, out  # without --strict compare only reports
    assert "NOT reproduced  oea c=1: TPOT mean" in out and "NOT reproduced (+29.9 %)" in out
    assert "oea c=4: DID NOT HOLD: significant only in the new run" in out
    assert "verdict: NOT REPRODUCED: 4 of 6 comparisons" in out
    code, out = _kit(bundles["a"], bundles["slower"], "--strict")
    assert code == ExitCode.NOT_REPRODUCED and "B against A: verdict: NOT REPRODUCED" in out, out


def test_json_carries_the_verdicts(bundles: dict[str, Path]) -> None:
    code, out = _kit(bundles["a"], bundles["slower"], "--json", "--margin", "10%")
    assert code == 0, out
    doc = json.loads(out)
    eq = doc["equivalence"]
    assert eq["verdict"] == "not_reproduced" and eq["margin"] == pytest.approx(0.1) and eq["margin_from"] == "--margin"
    oea = next(c for c in eq["comparisons"] if c["kind"] == "arm" and c["arm"] == "oea" and c["level"] == 4)
    assert oea["status"] == "not_reproduced" and oea["ratio"] == pytest.approx(1.3, rel=0.02)
    assert [c["held"] for c in eq["conclusions"]] == [False, False]
    assert {s["what"] for s in doc["setup"]} >= {"manifest.yaml sha256", "plan (cells, order, levels)", "kit version"}


def test_the_margin_decides_and_strict_says_inconclusive(bundles: dict[str, Path]) -> None:
    # A's manifest with a 40 % margin: a 30 % slower arm is within it
    a40 = bundles["a"].parent.parent / "a40" / bundles["a"].name
    a40.parent.mkdir()
    shutil.copytree(bundles["a"], a40)
    (a40 / "manifest.yaml").write_text((a40 / "manifest.yaml").read_text() + "  reproduce_margin: 0.4\n")
    eq = compare_bundles(a40, bundles["slower"])["equivalence"]
    assert eq.margin == pytest.approx(0.4) and eq.verdict == "reproduced", [c.text for c in eq.comparisons]
    # identical figures, but a 2 % margin is narrower than the intervals: inconclusive, with repeats advice
    code, out = _kit(bundles["a"], bundles["same"], "--margin", "2%", "--strict")
    assert code == ExitCode.INCONCLUSIVE and "repeats per arm in each run would decide" in out, out


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


def _log_cells(root: Path, arm: str, level: int) -> np.ndarray:
    """Each included cell's TPOT mean at ``level``, read from summary.json as plain JSON (not through kit)."""
    doc = json.loads((root / "summary.json").read_text())
    return np.log([c["levels"][str(level)]["tpot_ms"]["mean"] for c in doc["cells"]
                   if c["arm"] == arm and c["included"] and c["levels"].get(str(level), {}).get("ok", 0) > 0])


@pytest.mark.parametrize("other,p_key", [("slower", "p_different"), ("same", "p_equivalent")])
def test_one_decision_against_scipy(bundles: dict[str, Path], other: str, p_key: str) -> None:
    """Welch's t by scipy on the log cell means, then the one-sided tests against ±log(1.05) by hand."""
    new, orig = _log_cells(bundles[other], "oea", 4), _log_cells(bundles["a"], "oea", 4)
    res = sps.ttest_ind(new, orig, equal_var=False)
    d = float(new.mean() - orig.mean())
    se = math.sqrt(new.var(ddof=1) / new.size + orig.var(ddof=1) / orig.size)
    df, delta = float(res.df), math.log(1.05)
    half = sps.t.ppf(0.95, df) * se
    p = sps.t.sf((d - delta) / se, df) if p_key == "p_different" else \
        max(sps.t.sf((d + delta) / se, df), sps.t.cdf((d - delta) / se, df))
    eq = compare_bundles(bundles["a"], bundles[other])["equivalence"]
    c = next(c for c in eq.comparisons if c.kind == "arm" and c.arm == "oea" and c.level == 4)
    assert c.ratio == pytest.approx(math.exp(d), rel=1e-9) and c.df == pytest.approx(df, rel=1e-6)
    assert c.ratio_ci is not None and c.ratio_ci.low == pytest.approx(math.exp(d - half), rel=1e-6)
    assert c.ratio_ci.high == pytest.approx(math.exp(d + half), rel=1e-6)
    assert getattr(c, p_key) == pytest.approx(p, rel=1e-6, abs=1e-12) and p < 0.05
    assert c.verdict == ("not_reproduced" if other == "slower" else "reproduced")
