"""Outputs kit writes never follow a symlink at the output path. A link given as ``-o`` is refused (exit 2), its
target untouched: replacing it, as kit did until 2026-12-07, swapped ``/dev/stdout`` (a link to
``/proc/self/fd/1``) for a file for every process on the machine (tests/test_cli_outputs.py)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_compose_and_schema_outputs_refuse_a_symlink_and_leave_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for args in (["compose", str(ROOT / "experiments" / "oea.yaml")], ["schema"], ["schema", "--bundle"]):
        out = tmp_path / "out.yaml"
        out.unlink(missing_ok=True)
        out.symlink_to(victim)
        r = CliRunner().invoke(main, [*args, "-o", str(out)])
        assert r.exit_code == 2 and "is a symbolic link" in r.output, r.output
        assert victim.read_text() == "precious\n", args
        assert out.is_symlink(), args
