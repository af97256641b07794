"""Outputs kit writes never follow a symlink at the output path: the link is replaced, its target untouched."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kit.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_compose_and_schema_outputs_replace_a_symlink_not_its_target(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for args in (["compose", str(ROOT / "experiments" / "oea.yaml")], ["schema"], ["schema", "--bundle"]):
        out = tmp_path / "out.yaml"
        out.unlink(missing_ok=True)
        out.symlink_to(victim)
        r = CliRunner().invoke(main, [*args, "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert victim.read_text() == "precious\n", args
        assert not out.is_symlink() and out.stat().st_size > 100, args
