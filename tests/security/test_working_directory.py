"""Only the signed command's code runs: a `kit/` package (or any module) planted in the directory kit is
started from never reaches the server. The process runtime starts servers in the cell's own directory with
PYTHONSAFEPATH=1, so `{python} -m kit.engine` imports the installed engine, not the planted one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.manifests import ENGINE_ARGS, manifest_data, write_manifest


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_a_planted_kit_package_in_the_working_directory_never_runs(tmp_path: Path, port: int) -> None:
    planted = tmp_path / "wd"
    (planted / "kit" / "engine").mkdir(parents=True)
    marker = tmp_path / "PWNED"
    (planted / "kit" / "__init__.py").write_text("")
    (planted / "kit" / "engine" / "__init__.py").write_text("")
    (planted / "kit" / "engine" / "__main__.py").write_text(
        f"open({str(marker)!r}, 'w').write('planted code ran')\nraise SystemExit(3)\n")
    m = write_manifest(tmp_path / "m.yaml", manifest_data(
        "planted", port=port,
        command=["{python}", "-m", "kit.engine", "--host", "{host}", "--port", "{port}",
                 "--served-name", "{served_name}", *ENGINE_ARGS],
        load={"levels": [1], "requests_per_level": 2, "warmup_requests": 0, "prompt_tokens": 4, "output_tokens": 4},
        design={"repeats": 1}, gates={"port_deadline_s": 5},
    ))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    kit = Path(sys.executable).with_name("kit")  # the console script, as a user runs it (no cwd on sys.path)
    r = subprocess.run([str(kit), "run", str(m), "--out", str(tmp_path / "out"), "--allow-unsigned"],
                       capture_output=True, text=True, env=env, cwd=planted, timeout=300, check=False)
    assert not marker.exists(), "the planted kit/engine ran as the server"
    assert r.returncode == 0, r.stdout + r.stderr
