from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli import main
from kit.errors import CellsFailed, ExitCode, LoadError
from kit.manifest import load_manifest
from kit.plan import make_plan

ROOT = Path(__file__).resolve().parent.parent


def test_version() -> None:
    r = CliRunner().invoke(main, ["--version"])
    assert r.exit_code == 0 and "kit, version" in r.output


def test_every_command_has_help_and_is_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, cmd in main.commands.items():
        assert cmd.help, name
        assert f"kit {name}" in readme, f"`kit {name}` is not mentioned in README.md"


def test_plan_orders_cells_and_touches_nothing(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["plan", str(ROOT / "experiments/oea.yaml"), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    ids = [c["id"] for c in data["plan"]["cells"]]
    assert ids == [f"{arm}-r{r}" for r in (1, 2, 3) for arm in ("baseline", "oea", "oea-k8")]
    assert [lv["concurrency"] for lv in data["plan"]["levels"]] == [8, 16, 32, 64, 128]
    assert [lv["requests"] for lv in data["plan"]["levels"]] == [50, 80, 160, 320, 640]
    assert data["estimate"]["requests"] == 9 * (50 + 80 + 160 + 320 + 640)
    text = CliRunner().invoke(main, ["plan", str(ROOT / "experiments/oea.yaml")]).output
    assert "8 GPU(s) clean" in text and "images/oea FROM image of arm baseline" in text



def _two_arm_oea(tmp_path: Path) -> str:
    """experiments/oea.yaml as it was planned with two arms (no k0=8 control) and levels 10/64/256/1024: the
    shape the power numbers below were worked out for (family m = 4)."""
    text = (ROOT / "experiments/oea.yaml").read_text()
    text = text[: text.index("  - name: oea-k8")] + text[text.index("load:"):]
    text = text.replace("levels: [8, 16, 32, 64, 128]", "levels: [10, 64, 256, 1024]")
    path = tmp_path / "oea2.yaml"
    path.write_text(text)
    return str(path)


def _power_lines(output: str) -> dict[int, str]:
    """kit plan's per-level power lines, by concurrency."""
    return {int(line.split()[0][2:]): line for line in output.splitlines()
            if line.startswith("    c=") and "between-cell CV" in line}


def test_plan_prints_the_detectable_effect_per_level(tmp_path: Path) -> None:
    oea = _two_arm_oea(tmp_path)
    r = CliRunner().invoke(main, ["plan", oea, "--cv", "3%"])
    assert r.exit_code == 0, r.output
    lines = _power_lines(r.output)
    assert sorted(lines) == [10, 64, 256, 1024]
    # 3 cells per arm, m = 4 levels x 1 arm, alpha/m = 0.0125, CV 3 % (log sd 0.02999); oea.yaml's order is
    # interleaved, so the default test is Welch's (the paired t needs ABBA's alternating pairs): x1.190, as before
    # schema 5 (the paired t would give x1.320: 2 df, scipy.optimize.brentq over scipy.stats.nct)
    assert all("between-cell CV 3.0 % (assumed): detects +19.0 % / −16.0 % (×1.190 / ×0.840)" in v
               for v in lines.values()), lines
    # without --cv a GPU manifest assumes kit's measured 10 %, and says where it comes from
    default = _power_lines(CliRunner().invoke(main, ["plan", oea]).output)
    assert all("CV 10.0 % (assumed: measured 8-14 % between cells on an H200, eager engine): detects +78.6 %" in v
               for v in default.values()), default
    assert "family m = 4 (4 levels x 1 arm)" in r.output and "alpha/m = 0.05/4 = 0.0125" in r.output
    assert "assumes: log cell statistics normal" in r.output
    doubled = _power_lines(CliRunner().invoke(main, ["plan", oea, "--cv", "6%"]).output)
    assert "between-cell CV 6.0 % (assumed): detects +41.7 %" in doubled[10]  # about twice the log effect
    data = json.loads(CliRunner().invoke(main, ["plan", oea, "--json"]).output)
    pw = data["power"]
    assert (pw["family"], pw["repeats"], pw["primary"]) == (4, 3, "tpot_mean_ms") and pw["tail"] == pytest.approx(0.0125)
    assert [round(lv["mde_pct_up"], 1) for lv in pw["levels"]] == [78.6] * 4


def test_plan_target_effect_gives_repeats_per_arm(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["plan", _two_arm_oea(tmp_path), "--target-effect", "5%", "--cv", "3%"])
    assert r.exit_code == 0, r.output
    assert r.output.count("11 repeats (3 planned: power 7 %)") == 4
    r = CliRunner().invoke(main, ["plan", str(ROOT / "experiments/demo-levels.yaml"), "--target-effect", "0.05", "--cv", "3%"])
    assert r.output.count("12 repeats (6 planned: power 31 %)") == 4 and "rounded up to even for ABBA" in r.output
    r = CliRunner().invoke(main, ["plan", str(ROOT / "experiments/demo-levels.yaml"), "--target-effect", "0.5%"])
    assert r.exit_code == 0 and r.output.count("more than 100 repeats") == 4 and "out of reach" in r.output


def test_plan_pilot_prints_a_measured_cv_and_bad_inputs_are_named(tmp_path: Path) -> None:
    from support.bundles import ArmModel, BundleSpec, build_bundle

    from kit.signing import generate_key

    key = generate_key(tmp_path / "runner", "runner@test")
    spec = BundleSpec(arms={"base": ArmModel(), "oea": ArmModel()}, repeats=3, levels=(1, 4), requests=12, tokens=6,
                      cell_sd=0.08, seed=9)
    pilot = build_bundle(tmp_path / "results", key, spec=spec).root
    demo = str(ROOT / "experiments/demo-levels.yaml")
    r = CliRunner().invoke(main, ["plan", demo, "--pilot", str(pilot)])
    assert r.exit_code == 0, r.output
    lines = _power_lines(r.output)
    assumed = _power_lines(CliRunner().invoke(main, ["plan", demo]).output)
    assert "; pilot c=1, 6 cells)" in lines[1] and "; pilot c=4, 6 cells)" in lines[4]
    assert "80 % upper confidence bound of the pilot's" in lines[1] and "on 2 df, chi-square" in lines[1]  # blocked: 6 cells - 2 arms - 3 blocks + 1
    assert "pooled over its levels" in lines[16] and "the pilot's SD at its 80 % upper confidence bound" in r.output
    assert all(lines[c].split("): ")[1] != assumed[c].split("): ")[1] for c in lines)
    (pilot / "report.md").write_text("changed")
    r = CliRunner().invoke(main, ["plan", demo, "--pilot", str(pilot)])
    assert r.exit_code == ExitCode.BUNDLE_INVALID and "report.md" in r.output and "signed provenance" in r.output
    for args, words in ((["--pilot", str(tmp_path / "none")], "no such directory"),
                        (["--cv", "3%", "--pilot", str(pilot)], "not both"),
                        (["--target-effect", "5"], "positive fraction (0.05) or percentage (5%)"),
                        (["--cv", "abc"], "is not a number"),
                        (["--cv", "-1%"], "positive fraction")):
        r = CliRunner().invoke(main, ["plan", demo, *args])
        assert r.exit_code == ExitCode.USAGE and words in r.output and "Traceback" not in r.output, (args, r.output)

def test_design_orders() -> None:
    m = load_manifest(ROOT / "experiments/demo-levels.yaml").manifest
    def order(o: str) -> list[str]:
        mm = m.model_copy(update={"design": m.design.model_copy(update={"order": o, "repeats": 2})})
        return [c.id for c in make_plan(mm).cells]
    assert order("interleaved") == ["baseline-r1", "oea-r1", "baseline-r2", "oea-r2"]
    assert order("counterbalanced") == ["baseline-r1", "oea-r1", "oea-r2", "baseline-r2"]
    assert order("blocked") == ["baseline-r1", "baseline-r2", "oea-r1", "oea-r2"]
    rnd = order("random")
    assert sorted(rnd) == sorted(order("blocked")) and rnd == order("random")


@pytest.mark.slow  # seconds of subprocesses or plots: the slow tier (unit tier budget, issue 21)
def test_user_errors_have_no_traceback_and_debug_shows_it(tmp_path: Path) -> None:
    bad = tmp_path / "m.yaml"
    bad.write_text("name: [\n")
    cmd = [sys.executable, "-m", "kit", "validate", str(bad)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert p.returncode == 3 and "Traceback" not in p.stderr and "Error:" in p.stderr
    p = subprocess.run([sys.executable, "-m", "kit", "--debug", "plan", str(bad)], capture_output=True, text=True,
                       check=False)
    assert p.returncode == 3 and "Traceback" in p.stderr


def test_usage_error_is_exit_2() -> None:
    r = CliRunner().invoke(main, ["plan"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["no-such-command"])
    assert r.exit_code == 2


def test_schema_command_writes_the_checked_in_file(tmp_path: Path) -> None:
    out = tmp_path / "s.json"
    assert CliRunner().invoke(main, ["schema", "-o", str(out)]).exit_code == 0
    assert out.read_text() == (ROOT / "manifest.schema.json").read_text()


def test_kit_cli_process_never_imports_locust_or_scipy() -> None:
    """Locust (gevent patches the process) stays in the load driver; scipy (0.5 s of CPU to import, paid by every
    `python -m kit` start the tests make) in the functions that compute a statistic."""
    code = "import sys, kit.cli, kit.experiment, kit.load; print([m for m in ('locust', 'gevent', 'scipy') if m in sys.modules])"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "[]"


def test_cli_reference_is_up_to_date() -> None:
    from kit.cli_reference import reference

    assert (ROOT / "docs/cli.md").read_text() == reference(), "run `python -m kit.cli_reference > docs/cli.md`"


def test_notes_are_shown_after_the_message_and_before_the_hint() -> None:
    e = LoadError("all requests failed", hint="see server.log").note("The bundle is consistent")
    assert str(e) == "all requests failed\nThe bundle is consistent\nHint: see server.log"
    assert e.message == "all requests failed"  # the message itself is never edited
    failed = CellsFailed("2 cell(s) failed", exit_code=8)
    assert failed.exit_code == ExitCode.LOAD_FAILED and CellsFailed("x", exit_code=7).exit_code == 7


@pytest.mark.parametrize("args", [["plan", "experiments/demo.yaml"], ["plan", "experiments/demo.yaml", "--json"],
                                  ["validate", "experiments/demo.yaml"], ["--help"], ["plan", "--help"],
                                  ["--version"], ["schema"]])
@pytest.mark.slow  # seconds of subprocesses or plots: the slow tier (unit tier budget, issue 21)
def test_a_closed_stdout_ends_quietly_with_141(args: list[str]) -> None:
    """A real pipe whose reader is gone before kit writes (issue 21: `kit plan ... | head` died with an internal
    BrokenPipeError): every command ends with 128 + SIGPIPE and writes nothing to stderr."""
    import os

    r, w = os.pipe()
    p = subprocess.Popen([sys.executable, "-m", "kit", *args], stdout=w, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(w)
    os.close(r)
    _, err = p.communicate(timeout=120)
    assert p.returncode == ExitCode.BROKEN_PIPE == 141, err
    assert err == b""

