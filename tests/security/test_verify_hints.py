"""What `kit verify` prints of a bundle whose run has not ended works when pasted (a review found three that did
not): real runs of the small engine, stopped (SIGSTOP: its kit alive, holding the bundle's lock) and killed
(SIGKILL: no handler runs, as the OOM killer kills), then `kit verify` and exactly the command it printed, run by a
shell in another directory. Before: a live run was told `kit run --resume` (exit 2, in use); a killed run started
with --allow-unsigned the same without the flag (exit 4); a killed `kit reproduce --until-decided` too (not judged;
exit 2, as its looks decide its cells)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.manifests import ab_arms, manifest_data, write_manifest
from support.pasted import pasted
from trust_helpers import ROOT

from kit.plumbing.poll import poll_until

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "COLUMNS": "4000"}


def _kit(tmp_path: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **_env(tmp_path), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=300, env=env,
                          cwd=cwd, check=False)


def _manifest(tmp_path: Path, port: int, repeats: int) -> Path:
    """An unsigned manifest (run with --allow-unsigned): short cells of two arms, ``repeats`` each, abba."""
    return write_manifest(tmp_path / "tiny.yaml", manifest_data(
        "hint", port=port, arms=ab_arms(), server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": 4, "warmup_requests": 0, "prompt_tokens": 8,
              "output_tokens": 8, "seed": 3, "request_timeout_s": 60},
        design={"repeats": repeats, "order": "abba"}, gates={"port_deadline_s": 5}))


def _started(tmp_path: Path, args: list[str], out: Path, cwd: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """``kit ARGS`` once its first cell is checkpointed (start and one cell), and its bundle under ``out``."""
    env = {**os.environ, **_env(tmp_path), "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "kit", *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)

    def one_cell() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"kit ended ({proc.returncode}) before its first cell was checkpointed")
        # start and one cell checkpointed, and the next cell's server recorded (a kit stopped between spawning a
        # server and recording it leaves one its resume cannot know of: the port gate then refuses the resume)
        return len(list(out.glob("*/checkpoints/*.dsse.json"))) >= 2 and \
            any((tmp_path / "state" / "kit" / "servers").glob("*.json"))

    assert poll_until(one_cell, 240, interval=0.02)
    [b] = [p for p in out.iterdir() if p.is_dir()]
    return proc, b


def _killed(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def _printed_command(hint_output: str, start: str) -> str:
    [hint] = re.findall(r"^Hint: (.*)$", hint_output, flags=re.M)
    found = [c for c in hint.split("`")[1::2] if c.startswith(start)]
    assert len(found) == 1, hint_output
    return found[0]


def _pasted(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` pasted into a shell in another directory, `kit` being this checkout's kit."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    return pasted(command, tmp_path / "bin", env={**_env(tmp_path), "PYTHONPATH": str(ROOT)}, cwd=elsewhere,
                  timeout=400)


def test_a_live_run_is_in_progress_and_once_killed_the_printed_resume_finishes_it(tmp_path: Path, port: int) -> None:
    """Defects 2 and 1: while its kit holds the lock, verify names the run and its kit and prints no resume; once
    the kit is SIGKILLed, the resume it prints carries --allow-unsigned (the run's record) and finishes the bundle."""
    m, out = _manifest(tmp_path, port, repeats=1), tmp_path / "results"
    proc, b = _started(tmp_path, ["run", "--allow-unsigned", str(m), "--out", str(out)], out, ROOT)
    run_id = json.loads((b / "run.json").read_text())["run_id"]
    try:
        proc.send_signal(signal.SIGSTOP)  # alive, its lock held, its second cell not done: a run in progress
        v = _kit(tmp_path, "verify", str(b))
    finally:
        _killed(proc)
    assert v.returncode == 9, v.stdout + v.stderr
    assert "a run in progress" in v.stderr and f"run {run_id} (kit pid {proc.pid}, user " in v.stderr, v.stderr
    assert "--resume" not in v.stderr and "when that run has ended" in v.stderr, v.stderr
    v = _kit(tmp_path, "verify", str(b))  # its kit gone: the command that finishes it
    assert v.returncode == 9, v.stdout + v.stderr
    command = _printed_command(v.stderr, "kit run --resume")
    assert command == f"kit run --resume {b} --allow-unsigned", v.stderr
    r = _pasted(tmp_path, command)
    assert r.returncode == 0, command + "\n" + r.stdout + r.stderr
    assert json.loads((b / "run.json").read_text())["status"] == "complete"
    v = _kit(tmp_path, "verify", str(b))
    assert v.returncode == 0, v.stdout + v.stderr


def test_a_killed_reproduction_gets_the_reproduce_command_which_finishes_and_judges_it(
        tmp_path: Path, port: int) -> None:
    """Defect 3: a `kit reproduce --until-decided`, given its source by a relative path, SIGKILLed after its first
    cell: verify prints `kit reproduce SOURCE --resume NEW` with the source made absolute and the flags its run.json
    records; pasted elsewhere it finishes the run and judges it."""
    m = _manifest(tmp_path, port, repeats=4)  # --until-decided: abba, an even number of repeats, 4 or more
    first = _kit(tmp_path, "run", "--allow-unsigned", str(m), "--out", str(tmp_path / "source"))
    assert first.returncode == 0, first.stdout + first.stderr
    [src] = [p for p in (tmp_path / "source").iterdir() if p.is_dir()]
    out = tmp_path / "again"
    proc, b = _started(tmp_path, ["reproduce", f"source/{src.name}", "--allow-unsigned", "--until-decided",
                                  "--out", "again"], out, tmp_path)
    _killed(proc)
    v = _kit(tmp_path, "verify", str(b))
    assert v.returncode == 9, v.stdout + v.stderr
    command = _printed_command(v.stderr, "kit ")
    assert command == f"kit reproduce {src} --resume {b} --until-decided --allow-unsigned", v.stderr
    r = _pasted(tmp_path, command)
    assert r.returncode in (0, 10, 11), command + "\n" + r.stdout + r.stderr  # reproduced, inconsistent, imprecise
    assert json.loads((b / "run.json").read_text())["status"] == "complete"
    assert json.loads((b / "reproduce.json").read_text())["verdict"] in ("reproduced", "inconsistent", "imprecise")
    v = _kit(tmp_path, "verify", str(b))
    assert v.returncode == 0, v.stdout + v.stderr
