"""Only the signed command's code runs: a `kit/` package (or any module) planted in the directory kit is
started from never reaches the server. The process runtime starts servers in an empty directory of their own, outside
the bundle, with PYTHONSAFEPATH=1, so `{python} -m kit.engine` imports the installed engine, not the planted one; and
what a server leaves in its working directory (a socket, a FIFO, a large cache) never becomes a file of the bundle
(a review's server bound a UNIX socket there: exit 9 after the first cell, and every resume failed the same way)."""

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


@pytest.mark.slow
def test_what_a_server_writes_in_its_working_directory_stays_out_of_the_bundle(tmp_path: Path, port: int) -> None:
    litter = ('python3 -c "import socket; s = socket.socket(socket.AF_UNIX); s.bind(\'engine.sock\')"; mkfifo fifo; '
              'head -c 3000000 /dev/zero > cache.bin; pwd > ' + str(tmp_path / "cwd.txt") + '; exec "$0" "$@"')
    m = write_manifest(tmp_path / "m.yaml", manifest_data(
        "litter", port=port,
        command=["sh", "-c", litter, "{python}", "-m", "kit.engine", "--host", "{host}", "--port", "{port}",
                 "--served-name", "{served_name}", *ENGINE_ARGS],
        load={"levels": [1], "requests_per_level": 2, "warmup_requests": 0, "prompt_tokens": 4, "output_tokens": 4},
        design={"repeats": 1}, gates={"port_deadline_s": 5},
    ))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    r = subprocess.run([sys.executable, "-m", "kit", "run", str(m), "--out", str(tmp_path / "out"), "--allow-unsigned"],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    [bundle] = (tmp_path / "out").iterdir()
    names = {p.name for p in bundle.rglob("*")}
    assert not names & {"engine.sock", "fifo", "cache.bin"}, sorted(names)
    workdirs = (tmp_path / "cwd.txt").read_text().split()
    assert workdirs and all(not Path(w).exists() and not Path(w).is_relative_to(bundle) for w in workdirs)
    v = subprocess.run([sys.executable, "-m", "kit", "verify", str(bundle), "--integrity-only"],
                       capture_output=True, text=True, env=env, timeout=300, check=False)
    assert v.returncode == 0, v.stdout + v.stderr
