from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has NVIDIA tools")
def test_kit_gates_on_a_machine_without_nvidia_says_so_and_exits_5(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "PATH": "/usr/bin:/bin",
           "KIT_LOCK_DIR": os.environ["KIT_LOCK_DIR"]}
    p = subprocess.run([sys.executable, "-m", "kit", "gates", str(ROOT / "experiments/oea.yaml")],
                       capture_output=True, text=True, env=env, check=False, cwd=ROOT)
    assert p.returncode == 5, p.stdout + p.stderr
    assert "no NVIDIA driver found" in p.stdout + p.stderr
    assert "needs 8 GPUs" in p.stderr
    assert "Traceback" not in p.stderr
