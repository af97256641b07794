from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
    assert ids == ["baseline-r1", "oea-r1", "baseline-r2", "oea-r2", "baseline-r3", "oea-r3"]
    assert [lv["concurrency"] for lv in data["plan"]["levels"]] == [10, 64, 256, 1024]
    assert [lv["requests"] for lv in data["plan"]["levels"]] == [50, 320, 1280, 5120]
    assert data["estimate"]["requests"] == 6 * (50 + 320 + 1280 + 5120)
    text = CliRunner().invoke(main, ["plan", str(ROOT / "experiments/oea.yaml")]).output
    assert "8 GPU(s) clean" in text and "images/oea FROM image of arm baseline" in text


def test_design_orders() -> None:
    m = load_manifest(ROOT / "experiments/demo.yaml").manifest
    def order(o: str) -> list[str]:
        mm = m.model_copy(update={"design": m.design.model_copy(update={"order": o, "repeats": 2})})
        return [c.id for c in make_plan(mm).cells]
    assert order("interleaved") == ["baseline-r1", "oea-r1", "baseline-r2", "oea-r2"]
    assert order("counterbalanced") == ["baseline-r1", "oea-r1", "oea-r2", "baseline-r2"]
    assert order("blocked") == ["baseline-r1", "baseline-r2", "oea-r1", "oea-r2"]
    rnd = order("random")
    assert sorted(rnd) == sorted(order("blocked")) and rnd == order("random")


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


def test_kit_cli_process_never_imports_locust() -> None:
    code = "import sys, kit.cli, kit.experiment, kit.load; print('locust' in sys.modules, 'gevent' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.strip() == "False False"


def test_cli_reference_is_up_to_date() -> None:
    from kit.cli_reference import reference

    assert (ROOT / "docs/cli.md").read_text() == reference(), "run `python -m kit.cli_reference > docs/cli.md`"


def test_notes_are_shown_after_the_message_and_before_the_hint() -> None:
    e = LoadError("all requests failed", hint="see server.log").note("The bundle is consistent")
    assert str(e) == "all requests failed\nThe bundle is consistent\nHint: see server.log"
    assert e.message == "all requests failed"  # the message itself is never edited
    failed = CellsFailed("2 cell(s) failed", exit_code=8)
    assert failed.exit_code == ExitCode.LOAD_FAILED and CellsFailed("x", exit_code=7).exit_code == 7
