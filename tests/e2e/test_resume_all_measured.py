"""SIGKILL after the last cell's checkpoint, before the bundle is sealed (or a `kit report` cut short): every cell is
measured and nothing is left to run. Was: `kit run --resume` still reserved the run's ports and ran the gates, so
while another live run held the port it exited 5 and sealed the complete bundle as "failed". Now it only seals it:
exit 0, status complete, every cell kept byte for byte, the other run's reservation untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from crash_helpers import CELLS, checkpointed_cells, crash_manifest, files_of, kept_as_measured, start_kit
from e2e_helpers import ROOT, bundle_of, read_json
from support.ports import free_port

from kit.gates.reserve import reserved
from kit.manifest import load_manifest
from kit.plumbing.poll import poll_until
from kit.verify import verify_target

pytestmark = pytest.mark.slow


def test_a_resume_with_every_cell_measured_needs_no_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         isolated: dict[str, str]) -> None:
    """``isolated``: no Docker engine (was missing: a docker-tier test's container, made meanwhile beside it by
    another worker, failed this run's leftover gate, 2026-12-07)."""
    port = free_port()
    m = crash_manifest(tmp_path / "m.yaml", port)
    out = tmp_path / "results"
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}  # the reservations of this test's runs only
    proc = start_kit(["run", str(m), "--out", str(out), "--allow-unsigned"], env, tmp_path / "run.log")
    try:  # checkpoint 0 is the start, then one per cell: kill as soon as the last cell's is signed
        assert poll_until(lambda: proc.poll() is not None or any(out.glob(f"*/checkpoints/{len(CELLS):06d}.dsse.json")),
                          300, interval=0.005)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        proc.kill()
    b = bundle_of(out)
    if (b / "provenance.dsse.json").exists():
        pytest.skip("the run sealed its bundle before the kill landed")  # the window is the seal's: rare
    assert checkpointed_cells(b) == CELLS, (tmp_path / "run.log").read_text()
    before = files_of(b)
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    with reserved(load_manifest(m, allow_unpinned=True).manifest, "other1", tmp_path / "elsewhere"):
        r = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(b), "--allow-unsigned"],
                           capture_output=True, text=True, timeout=300, env=os.environ.copy(), cwd=ROOT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "reserved by run other1" not in r.stdout + r.stderr
    assert read_json(b / "run.json")["status"] == "complete"
    assert kept_as_measured(before, files_of(b), CELLS) == []
    verify_target(b, [])
