"""Issue 21: a server told the wrong port no longer waits out ready_timeout_s (600 s) in every cell of a real
`kit run`; the run's own summary (the first line of each reason) names where the server listens."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.manifests import manifest_data, write_manifest
from support.ports import free_port

from kit.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # kit run end to end: two cells, ~10 s of grace each
def test_kit_run_with_the_wrong_port_fails_each_cell_fast_naming_where_it_listens(tmp_path: Path) -> None:
    port, other = free_port(), free_port()
    path = write_manifest(tmp_path / "m.yaml", manifest_data(
        "wrongport", port=port, command=["{python}", "-m", "http.server", str(other), "--bind", "127.0.0.1"],
        arms=[{"name": "a1"}, {"name": "a2"}], design={"repeats": 1},
        server={"readiness_path": "/", "ready_timeout_s": 600}))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"),
           "KIT_LOCK_DIR": os.environ["KIT_LOCK_DIR"], "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}  # a docker-tier test's container fails no gate here
    t = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "kit", "run", str(path), "--allow-unsigned", "--out",
                        str(tmp_path / "r")], capture_output=True, text=True, check=False, cwd=ROOT, env=env,
                       timeout=590)
    took = time.monotonic() - t
    print(f"kit run took {took:.1f} s for 2 cells (ready_timeout_s 600)")
    assert p.returncode == ExitCode.SERVER_FAILED, p.stderr
    summary = next(line for line in p.stderr.splitlines() if "cell(s) failed" in line)
    for cell in ("a1-r1", "a2-r1"):
        assert f"{cell}: server for {cell[:2]} " in summary
    assert summary.count(f"listens on 127.0.0.1:{other}, not on 127.0.0.1:{port}") == 2
    assert f"(log: Serving HTTP on 127.0.0.1 port {other}" in summary
    assert "Traceback" not in p.stderr
