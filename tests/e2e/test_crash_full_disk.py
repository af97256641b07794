"""A full disk in the middle of a run, on a real tmpfs: a clean error with its own exit code, and once space is
back, `kit run --resume` finishes the bundle from its checkpoints."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from crash_helpers import CELLS, checkpointed_cells, crash_manifest, files_of, kept_as_measured, start_kit
from e2e_helpers import ROOT, bundle_of, read_json
from support.disks import fill, tmpfs

from kit.errors import ExitCode
from kit.plumbing.poll import poll_until
from kit.verify import verify_target

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", "32m") as disk:
        yield disk


def _a_cell_checkpointed(out: Path) -> bool:
    return out.is_dir() and any(out.iterdir()) and bool(checkpointed_cells(bundle_of(out)))


def test_full_disk_is_a_clean_error_and_the_bundle_resumes_once_space_is_back(
        tmp_path: Path, port: int, isolated: dict[str, str], small_disk: Path) -> None:
    m = crash_manifest(tmp_path / "m.yaml", port)
    out = small_disk / "results"
    proc = start_kit(["run", str(m), "--out", str(out), "--allow-unsigned"], {}, tmp_path / "run.log")
    try:
        # the disk fills up while the second cell runs (the first is checkpointed)
        assert poll_until(lambda: proc.poll() is not None or _a_cell_checkpointed(out), 300, interval=0.02)
        assert proc.poll() is None, (tmp_path / "run.log").read_text()
        filler = fill(small_disk)
        proc.wait(timeout=300)
    finally:
        proc.kill()
    log = (tmp_path / "run.log").read_text()
    assert proc.returncode == ExitCode.STORAGE, log
    assert "no space left on the device" in log and "--resume" in log, log
    assert "Traceback" not in log and "internal error" not in log, log
    b = bundle_of(out)
    assert not (b / "provenance.dsse.json").exists()  # nothing could be sealed ...
    completed = checkpointed_cells(b)  # ... but the checkpoints hold what completed
    assert completed, log
    before = files_of(b)

    filler.unlink()  # space is back
    r = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(b), "--allow-unsigned"],
                       capture_output=True, text=True, timeout=400, env=os.environ.copy(), cwd=ROOT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert read_json(b / "run.json")["status"] == "complete"
    assert sorted(p.name for p in (b / "cells").iterdir()) == CELLS
    assert kept_as_measured(before, files_of(b), completed) == []
    verify_target(b, [])
    # a resume of the complete bundle changes nothing, even while its server's port is taken
    sealed = files_of(b)
    with socket.create_server(("127.0.0.1", port)):
        again = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(b), "--allow-unsigned"],
                               capture_output=True, text=True, timeout=300, env=os.environ.copy(), cwd=ROOT,
                               check=False)
    assert again.returncode == 0 and "already complete" in again.stdout, again.stdout + again.stderr
    assert files_of(b) == sealed
    print(next(line for line in log.splitlines() if line.startswith("Error:")))
    print(f"disk full after {completed}; resumed to completion; {r.stderr.count('starting server')} cell(s) re-run")
