"""Two experiments share one host: two real `kit run`s of the small engine at once, on disjoint ports, in the
same state directory (one user's). Both complete; a `kit clean` while both servers are up removes nothing
of theirs and says whose they are; a third run of the first one's manifest under another HOME (another user's
kit, as far as kit can tell) is refused at once by the host-wide reservations, naming that run. Both kits are paused (SIGSTOP, their servers left running) for the clean and the third
run, so that both are still live then however fast the small engine answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from e2e_helpers import ROOT, bundle_of, kit, read_json, tiny_manifest
from support.ports import free_port

from kit.plumbing.poll import poll_until
from kit.runtime.records import all_record_files, live_owner, read_record

pytestmark = pytest.mark.slow
REQUESTS = 40


def _start(m: Path, out: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "kit", "run", str(m), "--out", str(out), "--allow-unsigned"],
                            cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def test_two_runs_on_disjoint_ports_both_complete_and_kit_clean_leaves_them_alone(
        tmp_path: Path, isolated: dict[str, str]) -> None:
    ports = [free_port(), free_port()]
    ms = [tiny_manifest(tmp_path / f"m{i}.yaml", p, name=f"share{i}", levels=(1,), requests=REQUESTS,
                       repeats=1)
          for i, p in enumerate(ports)]
    outs = [tmp_path / "r0", tmp_path / "r1"]
    runs = [_start(m, out, isolated) for m, out in zip(ms, outs, strict=True)]
    try:
        def both_serving() -> list[dict[str, object]] | None:  # a server of each run is up and recorded
            records = [r for p in all_record_files() if (r := read_record(p)) is not None]
            live = [r for r in records if psutil.pid_exists(int(r["pgid"])) and live_owner(r["run_id"])]
            return live if len({r["run_id"] for r in live}) == 2 else None

        live = poll_until(both_serving, 120, interval=0.05)
        assert live, [r.poll() for r in runs]
        owners = {str(r["run_id"]): live_owner(str(r["run_id"])) for r in live}
        for p in runs:  # both kits paused (not their servers): their servers stay up until kit clean is done
            p.send_signal(signal.SIGSTOP)
        cleaned = kit("clean", "--json", env=isolated)
        assert cleaned.returncode == 0, cleaned.stderr
        out = json.loads(cleaned.stdout)
        assert out["server_process_groups"] == [] and out["stale_run_locks"] == [], out  # nothing stopped
        kept = "\n".join(out["live_run_server_groups_left_alone"])
        for run_id, owner in owners.items():
            assert owner is not None and f"run {run_id} (kit pid {owner['pid']}" in kept, kept
        assert all(psutil.pid_exists(int(r["pgid"])) for r in live)  # kit clean stopped neither server
        # the review's repro (N1): run 0's manifest by another user's kit (here: another HOME and state directory).
        # Before, reservations lived in each HOME: it started, and run 0 failed its next port gate (exit 5) with a
        # hint to kill this one's server. The host-wide lock directory refuses it at once, naming run 0.
        other_home = {**isolated, "HOME": str(tmp_path / "home2"), "XDG_STATE_HOME": str(tmp_path / "home2" / "state"),
                      "XDG_CONFIG_HOME": str(tmp_path / "home2" / "config")}
        refused = kit("run", str(ms[0]), "--out", str(tmp_path / "r2"), "--allow-unsigned", env=other_home)
        for p in runs:
            p.send_signal(signal.SIGCONT)
        results = [p.communicate(timeout=300) for p in runs]
    finally:
        for p in runs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.send_signal(signal.SIGTERM)  # SIGINT: ignored where make runs in the background
                p.wait(timeout=60)
    for p, (stdout, stderr) in zip(runs, results, strict=True):
        assert p.returncode == 0, stdout + stderr
    for out_dir in outs:
        b = bundle_of(out_dir)
        assert read_json(b / "run.json")["status"] == "complete"
        for cell in sorted(b.glob("cells/*/cell.json")):  # no server was stopped under load: every request ok
            assert read_json(cell)["status"] == "ok", cell
            lines = (cell.parent / "level-1" / "records.jsonl").read_text().splitlines()
            records = [json.loads(x) for x in lines]
            assert len(records) == REQUESTS and all(x["status"] == 200 and x["error"] is None for x in records), cell
    assert refused.returncode == 5, refused.stdout + refused.stderr
    first = next(o for o in owners.values() if o is not None and o["ports"] == [ports[0]])
    assert f"port {ports[0]} is reserved by run {first['run_id']} (kit pid {first['pid']}, user " in refused.stderr
    assert "still running" in refused.stderr
    assert "kit clean, or" not in refused.stderr and "kill" not in refused.stderr  # no hint to kill a live run
    assert not (tmp_path / "r2").exists() or not list((tmp_path / "r2").iterdir())  # refused before any bundle
    assert [p for p in all_record_files() if read_record(p) is not None] == []  # both stopped their servers

