"""`kit plan --pilot`: the between-cell variation measured in a signed bundle, against the same figure computed
here with json and numpy straight from the cell files; and the report's read-back of it from the intervals."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2
from support.bundles import ArmModel, BundleSpec, build_bundle

from kit.errors import BundleError, UsageError
from kit.files.summary import Summary
from kit.manifest import load_manifest
from kit.plan import pilot_sd, power_plan
from kit.report.power import detectable
from kit.signing import generate_key
from kit.stats import summarize_bundle
from kit.stats.ab import metric_by_key
from kit.stats.power import cv_from_sd, mde

ROOT = Path(__file__).resolve().parents[2]
TPOT = metric_by_key("tpot_mean_ms")
PILOT = BundleSpec(arms={"base": ArmModel(), "oea": ArmModel(itl_factor=0.8)}, repeats=4, levels=(1, 4),
                   requests=24, tokens=8, cell_sd=0.06, seed=5)


def _signed(tmp: Path, spec: BundleSpec) -> Path:
    key = generate_key(tmp / "keys" / "runner", "runner@test")
    return build_bundle(tmp / "results", key, spec=spec).root


@pytest.fixture(scope="module")
def pilot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _signed(tmp_path_factory.mktemp("pilot"), PILOT)


def _tpot_cell_means(root: Path) -> dict[int, dict[str, list[float]]]:
    """Per level and arm, each ok cell's mean TPOT (ms) over its ok requests with 2+ tokens, from the files."""
    plan = json.loads((root / "plan.json").read_text())
    out: dict[int, dict[str, list[float]]] = {}
    for cell in plan["cells"]:
        if json.loads((root / "cells" / cell["id"] / "cell.json").read_text())["status"] != "ok":
            continue
        for lv in plan["levels"]:
            c = lv["concurrency"]
            tpots = []
            for line in (root / "cells" / cell["id"] / f"level-{c}" / "records.jsonl").read_text().splitlines():
                r = json.loads(line)
                tokens = r["usage_completion_tokens"] or r["client_tokens"]
                if r["status"] == 200 and r["error"] is None and r["ttft_ns"] is not None and tokens > 1:
                    tpots.append((r["e2e_ns"] - r["ttft_ns"]) / (tokens - 1) / 1e6)
            out.setdefault(c, {}).setdefault(cell["arm"], []).append(float(np.mean(tpots)))
    return out


def test_pilot_sd_equals_numpy_on_the_cell_files(pilot: Path) -> None:
    measured = pilot_sd(pilot, TPOT)
    means = _tpot_cell_means(pilot)
    assert sorted(measured) == sorted(means) == [1, 4]
    for level, arms in means.items():
        logs = [np.log(np.array(v)) for v in arms.values()]
        ss = sum(float(((x - x.mean()) ** 2).sum()) for x in logs)
        df = sum(x.size - 1 for x in logs)
        sd, got_df, cells = measured[level]
        assert (got_df, cells) == (df, 8) == (6, 8)
        assert sd == pytest.approx(math.sqrt(ss / df), rel=1e-9)
        assert 0.02 < sd < 0.15  # the factory's 6 % cell sd, 1 % cell x level sd


def test_power_plan_uses_the_pilots_cv_per_level(pilot: Path) -> None:
    m = load_manifest(ROOT / "experiments" / "demo-levels.yaml").manifest  # levels 1, 4, 16, 64; 6 repeats
    assumed = power_plan(m)
    measured = power_plan(m, pilot=pilot)
    sds = pilot_sd(pilot, TPOT, method="blocked")  # demo.yaml's analysis.method: the default, blocked
    by_level = {lv.concurrency: lv for lv in measured.levels}
    # planned at the SD's 80 % upper confidence bound (chi-square, by scipy here), the estimate kept beside it
    bound = [sds[c][0] * math.sqrt(sds[c][1] / chi2.ppf(0.2, sds[c][1])) for c in (1, 4)]
    assert [by_level[1].log_sd, by_level[4].log_sd] == pytest.approx(bound, rel=1e-12)
    assert by_level[1].estimate_sd == sds[1][0] and by_level[1].df == sds[1][1] == 3  # 8 cells - 2 arms - 4 blocks + 1
    pooled = math.sqrt((sds[1][0] ** 2 * 3 + sds[4][0] ** 2 * 3) / 6)
    assert by_level[16].estimate_sd == pytest.approx(pooled) and by_level[16].df == 6
    assert by_level[16].log_sd == pytest.approx(pooled * math.sqrt(6 / chi2.ppf(0.2, 6)))
    assert "no c=16 there" in by_level[16].source
    assert by_level[1].mde == pytest.approx(mde(bound[0], 6, 6, 0.05 / 4, method="blocked"))
    assert all(a.mde != b.mde for a, b in zip(assumed.levels, measured.levels, strict=True))
    assert [lv.cv for lv in assumed.levels] == pytest.approx([0.30] * 4)  # a CPU manifest: kit's measured CV


def test_the_report_reads_the_same_variation_back_from_the_intervals(pilot: Path) -> None:
    summary = Summary.model_validate(summarize_bundle(pilot))
    sds = pilot_sd(pilot, TPOT, method="welch")  # 4 repeats: Welch is the default (BLOCKED_MIN_REPEATS = 6)
    for c in summary.comparisons:
        if c.role == "primary":
            d = detectable(c, summary.analysis)
            assert d is not None and d.log_sd == pytest.approx(sds[c.level][0], rel=1e-4)  # 6 significant digits
            assert d.mde == pytest.approx(mde(sds[c.level][0], 4, 4, 0.05 / 2, method="welch"), rel=1e-3)
            assert cv_from_sd(d.log_sd) > d.log_sd


def test_bad_pilots_are_named_errors(pilot: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        pilot_sd(tmp_path / "nothing", TPOT)
    unsigned = tmp_path / "unsigned"
    shutil.copytree(pilot, unsigned)
    (unsigned / "provenance.dsse.json").unlink()
    with pytest.raises(BundleError, match="never signed") as e:
        pilot_sd(unsigned, TPOT)
    assert "signed provenance" in str(e.value)
    tampered = tmp_path / "tampered"
    shutil.copytree(pilot, tampered)
    rec = tampered / "cells" / "oea-r1" / "level-1" / "records.jsonl"
    rec.write_text(rec.read_text().replace('"status":200', '"status":201', 1))
    with pytest.raises(BundleError, match="failed verification"):
        pilot_sd(tampered, TPOT)
    one = _signed(tmp_path / "one", BundleSpec(arms=PILOT.arms, repeats=1, levels=(1, 4), requests=6, tokens=4))
    with pytest.raises(UsageError, match="arm base has 1 ok cell"):
        pilot_sd(one, TPOT)
    single_token = _signed(tmp_path / "tok", BundleSpec(arms=PILOT.arms, repeats=2, levels=(1,), requests=6, tokens=1))
    with pytest.raises(UsageError, match="no tpot_mean_ms"):
        pilot_sd(single_token, TPOT)
    with pytest.raises(UsageError, match="not both"):
        power_plan(load_manifest(ROOT / "experiments" / "demo-levels.yaml").manifest, cv=0.03, pilot=pilot)


def test_a_cv_too_small_to_plan_with_is_a_usage_error_not_an_internal_one() -> None:
    """--cv 1e-200 squared underflows to 0 (the log SD with it): a clear refusal, exit 2, from the CLI too."""
    import subprocess
    import sys

    from kit.stats.power import MIN_CV, sd_from_cv

    assert sd_from_cv(1e-200) == 0.0  # why: ln(1 + CV²) is 0 in floating point
    m = load_manifest(ROOT / "experiments" / "demo-levels.yaml").manifest
    for cv in (1e-200, MIN_CV / 2):
        with pytest.raises(UsageError, match=r"--cv .* is below 1e-06") as e:
            power_plan(m, cv=cv)
        assert e.value.exit_code == 2 and e.value.hint and "--pilot" in e.value.hint
    assert power_plan(m, cv=MIN_CV).levels[0].mde is not None
    r = subprocess.run([sys.executable, "-m", "kit", "plan", str(ROOT / "experiments" / "demo-levels.yaml"), "--cv",
                        "1e-200"], capture_output=True, text=True, cwd=ROOT, check=False)
    assert r.returncode == 2 and "is below 1e-06" in r.stderr and "internal error" not in r.stderr


def test_a_pilot_whose_cells_are_identical_says_it_shows_no_variation(tmp_path: Path) -> None:
    """Replayed records (the same six per arm and level in every repeat) give a between-cell SD of exactly 0."""
    same = _signed(tmp_path, BundleSpec(arms=PILOT.arms, repeats=2, levels=(1, 4), toy_records=True))
    means = _tpot_cell_means(same)
    assert all(len(set(v)) == 1 for arms in means.values() for v in arms.values())  # identical, from the files
    with pytest.raises(UsageError, match=r"cells at c=1 have the same tpot_mean_ms in every arm .*no variation"):
        pilot_sd(same, TPOT)
    m = load_manifest(ROOT / "experiments" / "demo-levels.yaml").manifest
    with pytest.raises(UsageError, match="no variation"):
        power_plan(m, pilot=same)
