"""The CPU gate through `kit gates` (a real subprocess) and run_gates: pinned CPUs that exist pass, CPUs this
machine does not have (or that kit may not use under taskset) fail with exit 5 naming them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.gates import run_gates
from kit.manifest import load_manifest
from kit.plumbing.affinity import available_cpus

ROOT = Path(__file__).resolve().parents[2]


def _manifest(tmp_path: Path, server: str | None, load: str | None) -> Path:
    data = yaml.safe_load((ROOT / "experiments" / "demo.yaml").read_text())
    if server is not None:
        data["server"]["cpus"] = server
    if load is not None:
        data["load"]["cpus"] = load
    p = tmp_path / "m.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def test_no_pinning_no_cpu_gate(tmp_path: Path) -> None:
    m = load_manifest(_manifest(tmp_path, None, None), allow_unpinned=True).manifest
    assert "cpus" not in [c.name for c in run_gates(m, phase="doctor").checks]


def test_cpus_that_exist_pass_with_evidence(tmp_path: Path) -> None:
    mine = sorted(available_cpus())
    m = load_manifest(_manifest(tmp_path, str(mine[-1]), str(mine[0])), allow_unpinned=True).manifest
    check = next(c for c in run_gates(m, phase="doctor").checks if c.name == "cpus")
    assert check.ok, check.message
    assert check.evidence["server_cpus"] == str(mine[-1]) and check.evidence["missing"] == {}


def test_missing_cpus_fail_the_gate_with_exit_5(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    path = _manifest(tmp_path, "0,4000-4001", None)
    p = subprocess.run([sys.executable, "-m", "kit", "gates", str(path)], capture_output=True, text=True, env=env,
                       check=False, cwd=ROOT, timeout=120)
    assert p.returncode == 5, p.stdout + p.stderr
    assert "server.cpus names CPU(s) 4000-4001" in p.stdout + p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.skipif(not shutil.which("taskset") or len(available_cpus()) < 2, reason="needs taskset and 2 CPUs")
def test_load_cpus_outside_kits_own_affinity_fail(tmp_path: Path) -> None:
    mine = sorted(available_cpus())
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    path = _manifest(tmp_path, None, str(mine[-1]))
    # kit itself confined to the first CPU (as under a narrower Slurm allocation): the load cannot go to the last
    p = subprocess.run(["taskset", "-c", str(mine[0]), sys.executable, "-m", "kit", "gates", str(path)],
                       capture_output=True, text=True, env=env, check=False, cwd=ROOT, timeout=120)
    assert p.returncode == 5, p.stdout + p.stderr
    assert f"load.cpus names CPU(s) {mine[-1]}" in p.stdout + p.stderr


def test_plan_shows_the_pinning_and_warns_when_server_and_load_share_cpus(tmp_path: Path) -> None:
    from kit.server_spec import host_exposure

    m = load_manifest(_manifest(tmp_path, "3, 1-2", "2-5"), allow_unpinned=True).manifest
    assert m.server.cpus == "1-3" and m.load.cpus == "2-5"  # stored as the kernel spells it
    view = host_exposure(m)[0]
    assert view["cpus"] == "1-3"
    assert any("share CPU(s) 2-3" in w for w in view["warnings"])
    p = subprocess.run([sys.executable, "-m", "kit", "plan", str(tmp_path / "m.yaml")], capture_output=True,
                       text=True, check=False, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "cpus: 1-3" in p.stdout and "share CPU(s) 2-3" in p.stdout
