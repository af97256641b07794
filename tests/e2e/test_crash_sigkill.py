"""SIGKILL at random moments (the OOM killer, Slurm's KillWait, a node crash): `kit run` killed alone, as the
kernel kills it, with no handler run and no `kit clean` after; `kit run --resume` must finish the bundle."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import pytest
from crash_helpers import (
    CELLS,
    checkpointed_cells,
    crash_manifest,
    files_of,
    kept_as_measured,
    processes_with,
    start_kit,
)
from e2e_helpers import ROOT, bundle_of, read_json
from support.pasted import pasted
from support.ports import free_port

from kit.bundle import runner_key
from kit.plumbing.net import port_bindable
from kit.plumbing.poll import poll_until
from kit.verify import verify_target

pytestmark = pytest.mark.slow

# One kill in each of KILLS equal slices of the run (stratified: uniform within its slice), from before the first
# cell to past the last: every phase gets its kill whatever the draw. Was 20 kills uniform over the whole run (107 s
# of CPU in `make test`, the suite's largest; the CPU-bound tiers' wall time was the budget's limit).
KILLS = 12
SEED = 21
WORKERS = 4  # trials at once, each with its own port, state directory and bundle
CELL_S = 4.0  # a cell's time until one is measured


@dataclass
class Trial:
    index: int
    moment: float  # in cells: 1.4 = 40 % of a cell's time after the first cell's checkpoint; past the last: the end
    bundle: Path | None = None
    delay_s: float = 0.0  # when the kill came, after the run's first checkpoint
    completed: list[str] = field(default_factory=list)  # cells checkpointed ok before the kill
    partial: list[str] = field(default_factory=list)  # cell directories that were not
    problems: list[str] = field(default_factory=list)
    tries: int = 0


def _checkpoints(proc: subprocess.Popen[bytes], out: Path, n: int) -> bool:
    """At least ``n`` checkpoints are signed (or kit is gone)."""
    return proc.poll() is not None or len(list(out.glob("*/checkpoints/*.dsse.json"))) >= n


def _kill_at(t: Trial, proc: subprocess.Popen[bytes], out: Path) -> bool:
    """SIGKILL kit at ``t.moment`` (measured in cells, so that the kills spread over every phase of the run, in
    a cell, between two, in the end, however fast this machine runs cells); False when kit exited first."""
    whole, frac = int(t.moment), t.moment - int(t.moment)
    assert poll_until(partial(_checkpoints, proc, out, 1), 300, interval=0.01)
    t_first = t_last = time.monotonic()
    cell_s = CELL_S
    for n in range(2, whole + 2):  # checkpoint n-1 closes cell n-1
        assert poll_until(partial(_checkpoints, proc, out, n), 300, interval=0.01)
        now = time.monotonic()
        cell_s, t_last = now - t_last, now
    time.sleep(frac * cell_s)
    if proc.poll() is not None:
        return False
    t.delay_s = time.monotonic() - t_first
    os.kill(proc.pid, signal.SIGKILL)  # kit alone: its server and load drivers are in groups of their own
    proc.wait(timeout=30)
    return True


def _run_trial(t: Trial, base: Path, rng: random.Random) -> Trial:
    d = base / f"kill-{t.index:02d}"
    d.mkdir()
    while True:
        t.tries += 1
        port = free_port()
        state = d / f"state-{t.tries}"
        env = {"XDG_STATE_HOME": str(state)}
        out = d / f"r{t.tries}"
        m = crash_manifest(d / f"m{t.tries}.yaml", port)
        proc = start_kit(["run", str(m), "--out", str(out), "--allow-unsigned"], env, d / "run.log")
        if _kill_at(t, proc, out):
            break
        assert t.tries < 4, f"trial {t.index}: kit exited ({proc.returncode}) before every moment tried"
        t.moment = rng.uniform(0, t.moment)  # the run ended first: an earlier moment, same seed
    b = t.bundle = bundle_of(out)
    before = files_of(b)
    t.completed = checkpointed_cells(b)
    t.partial = sorted({r.split("/")[1] for r in before if r.startswith("cells/")} - set(t.completed))
    r = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(b), "--allow-unsigned"],
                       capture_output=True, text=True, timeout=400, env={**os.environ, **env}, cwd=ROOT, check=False)
    if r.returncode != 0:
        t.problems.append(f"resume exited {r.returncode}: {r.stderr[-2000:]}")
        return t
    run = read_json(b / "run.json")
    cells = sorted(p.name for p in (b / "cells").iterdir())
    if run["status"] != "complete" or any(read_json(b / "cells" / c / "cell.json")["status"] != "ok" for c in cells):
        t.problems.append(f"not complete after the resume: {run['status']}")
    if cells != CELLS:
        t.problems.append(f"cells after the resume: {cells}")
    t.problems += kept_as_measured(before, files_of(b), t.completed)
    left = processes_with(env_entry=f"XDG_STATE_HOME={state}") + processes_with(argv_part=f"--port {port} ")
    if left or not port_bindable("127.0.0.1", port):
        t.problems.append(f"left running after the resume: {left} (port {port} bindable: "
                          f"{port_bindable('127.0.0.1', port)})")
    return t


def test_sigkill_at_random_moments_in_every_slice_of_the_run_every_bundle_resumes_to_completion(
        tmp_path: Path, isolated: dict[str, str]) -> None:
    t0 = time.monotonic()
    runner_key(None)  # the runner key and its trust line, made once before the trials run side by side
    rng = random.Random(SEED)
    span = len(CELLS) + 0.6
    trials = [Trial(i, rng.uniform(i, i + 1) * span / KILLS) for i in range(KILLS)]
    rngs = [random.Random(SEED * 1000 + i) for i in range(KILLS)]
    with ThreadPoolExecutor(WORKERS) as pool:
        done = list(pool.map(lambda t: _run_trial(t, tmp_path, rngs[t.index]), trials))
    verified = 0
    for t in done:
        assert t.bundle is not None
        if not t.problems:
            verify_target(t.bundle, [])  # kit verify: signatures, trust, every file, the chain, the summary
            verified += 1
    report = [f"kill {t.index:2d} at cell {t.moment:4.2f}, +{t.delay_s:5.2f} s after the first checkpoint (try {t.tries}): "
              f"{len(t.completed)} cell(s) checkpointed before it {t.completed}, partial {t.partial}"
              + (f"; PROBLEMS: {t.problems}" if t.problems else "") for t in done]
    print("\n".join(report))
    print(f"{KILLS} SIGKILLs, {verified} resumed to completion and verified, "
          f"{sum(len(t.completed) for t in done)} checkpointed cells kept byte for byte, "
          f"{time.monotonic() - t0:.0f} s with {WORKERS} at once")
    assert all(not t.problems for t in done), "\n".join(report)
    assert verified == KILLS
    assert max(len(t.completed) for t in done) >= 1  # the kills did land after completed cells


def test_sigkill_before_the_first_checkpoint_says_so_and_the_printed_command_runs_it_again(
        tmp_path: Path, isolated: dict[str, str]) -> None:
    """Killed while it starts (bundle directory made, `start` checkpoint not yet signed): nothing was measured or
    started. The resume says so (exit 9) and prints the command it was started with; pasted, that command runs
    the experiment to completion in a new bundle, and nothing is left running."""
    import re
    import shlex

    env: dict[str, str] = {}
    for tries in range(1, 6):
        state = tmp_path / f"state-{tries}"
        env = {"XDG_STATE_HOME": str(state)}
        out = tmp_path / f"r{tries}"
        m = crash_manifest(tmp_path / "m.yaml", free_port())
        proc = start_kit(["run", str(m), "--out", str(out), "--allow-unsigned"], env, tmp_path / "run.log")
        started = partial(lambda p, o: p.poll() is not None or any(o.glob("*/run.json")), proc, out)
        assert poll_until(started, 120, interval=0.001)  # run.json: written with the manifest and plan, before `start`
        os.kill(proc.pid, signal.SIGSTOP)  # frozen inside the window, or past it: look before killing
        early = not list(out.glob("*/checkpoints/*"))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        if early:
            break
    assert early, "the first checkpoint came before the bundle directory could be seen in 5 tries"
    b = bundle_of(out)
    r = subprocess.run([sys.executable, "-m", "kit", "run", "--resume", str(b), "--allow-unsigned"],
                       capture_output=True, text=True, timeout=120, env={**os.environ, **env, "COLUMNS": "4000"},
                       cwd=ROOT, check=False)
    assert r.returncode == 9, r.stderr
    assert "stopped before its first checkpoint" in r.stderr and "nothing was measured" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    [command] = re.findall(r"records, from where it ran\): (kit run .*?); this directory", r.stderr) or [r.stderr]
    assert shlex.split(command) == ["kit", "run", str(m), "--out", str(out), "--allow-unsigned"], command
    again = pasted(command, tmp_path / "bin", env=env, cwd=ROOT, timeout=400)
    assert again.returncode == 0, again.stdout + again.stderr
    [new] = [p for p in out.iterdir() if p.is_dir() and p != b]
    assert read_json(new / "run.json")["status"] == "complete"
    verify_target(new, [])
    assert processes_with(env_entry=f"XDG_STATE_HOME={env['XDG_STATE_HOME']}") == []
