"""A shipped manifest validated on a clean clone, before its model is made (issue 21): exit 3 naming model.path,
and a hint naming the exact command that makes it (the one the manifest's own header gives); that command, pasted
into a shell where kit runs, makes the model, and the same `kit validate` then passes. The check is not weakened:
the command is only shown."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kit.manifest.runnable import make_command

ROOT = Path(__file__).resolve().parents[2]


def _validate(cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", "validate", str(ROOT / "experiments/transformers-cpu.yaml")],
                          capture_output=True, text=True, timeout=120, cwd=cwd, env=env, check=False)


@pytest.mark.slow  # makes the tiny model (seconds of torch)
def test_the_missing_model_hint_names_the_command_that_makes_it_and_that_command_works(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'images/transformers'}", "COLUMNS": "4000",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}  # `python`: kit's own
    r = _validate(tmp_path, env)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "model.path 'build/models/transformers-tiny-cpu'" in r.stderr
    m = re.search(r"make it with the command the manifest gives, from where kit runs: `([^`]+)`", r.stderr)
    assert m is not None, r.stderr
    assert m.group(1) == "python -m kit_hf.make_model tiny-cpu build/models/transformers-tiny-cpu --seed 0"
    made = subprocess.run(["sh", "-c", m.group(1)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env, check=False)
    assert made.returncode == 0, made.stdout + made.stderr
    again = _validate(tmp_path, env)
    assert again.returncode == 0, again.stdout + again.stderr


def test_only_a_comment_that_runs_a_command_on_the_path_is_taken() -> None:
    raw = (b"# the model at build/m is small\n#   python -m make_it tiny build/m --seed 0\nmodel:\n  path: build/m\n"
           b"# ./mk build/mm\n")
    assert make_command(raw, "build/m") == "python -m make_it tiny build/m --seed 0"
    assert make_command(raw, "build/mm") == "./mk build/mm"
    assert make_command(b"# python -m x build/other\n", "build/m") is None
    assert make_command(b"command: python -m x build/m\n", "build/m") is None  # not a comment
