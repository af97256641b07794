"""A recorded PGID counts only while its leader is the recorded process (start time and command line):
`kit clean` never signals a live, unrelated process group that now has the recorded number, and the
leftover gate does not blame it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.gates.leftovers import check_process_groups
from kit.plumbing.procs import group_members, start_ticks
from kit.runtime.records import cmdline

KIT = [sys.executable, "-m", "kit"]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process in a session (and process group) of its own."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    deadline = time.monotonic() + 5
    while cmdline(proc.pid) != ["sleep", "600"] and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    proc.kill()
    proc.wait()


def _record(state: Path, pgid: int, **identity: object) -> Path:
    d = state / "kit" / "servers"
    d.mkdir(parents=True, exist_ok=True)
    path = d / f"{pgid}.json"
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    doc = {"pgid": pgid, "pid": pgid, "run_id": "old-run", "cell": "a-r1", "command": ["python", "-m", "kit.engine"],
           "started": "2026-01-01T00:00:00Z", "boot_id": boot, **identity}
    path.write_text(json.dumps(doc))
    return path


def _clean(state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_STATE_HOME": str(state), "DOCKER_HOST": f"unix://{state}/no-docker.sock"}
    return subprocess.run([*KIT, "clean"], capture_output=True, text=True, env=env, cwd=ROOT, timeout=60, check=False)


def _stopped(stdout: str, pgid: int) -> list[str]:
    """The lines of `kit clean`'s "server process groups stopped" list about group ``pgid``. Not its count: under
    `make test`'s parallel workers, kit clean also stops the cgroup of another test's server whose kit was killed
    (no record of this test's state directory names it), which made "stopped: 0" read "stopped: 1" (2026-12-07)."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("server process groups stopped: "))
    items = []
    for line in lines[start + 1:]:
        if not line.startswith("  "):
            break
        items.append(line.strip())
    return [i for i in items if i.startswith(f"group {pgid} ")]


def test_clean_does_not_kill_a_reused_pgid(tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    ticks = start_ticks(stranger.pid)
    assert ticks is not None
    record = _record(tmp_path, stranger.pid, start_ticks=ticks - 100, cmdline=["python", "-m", "kit.engine"])
    res = _clean(tmp_path)
    assert res.returncode == 0, res.stderr
    assert _stopped(res.stdout, stranger.pid) == [], res.stdout
    assert f"group {stranger.pid} not signalled: PID {stranger.pid} now started at tick {ticks}" in res.stdout
    assert "the PGID was reused" in res.stdout
    time.sleep(0.2)
    assert stranger.poll() is None and group_members(stranger.pid) == [stranger.pid]
    assert not record.exists()


def test_a_leader_that_exec_d_is_still_the_recorded_one(tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    """Same PID and start time, another command line: the leader exec'd (``sh -c 'exec ...'``, kit's subreaper
    shim, a server that re-execs itself). Was: taken for a stranger, its record dropped, the leftover left running."""
    _record(tmp_path, stranger.pid, start_ticks=start_ticks(stranger.pid), cmdline=["sh", "-c", "exec sleep 600"])
    res = _clean(tmp_path)
    assert res.returncode == 0 and len(_stopped(res.stdout, stranger.pid)) == 1, res.stdout
    assert stranger.wait(timeout=10) is not None


def test_record_without_identity_is_never_signalled(tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    _record(tmp_path, stranger.pid)  # an older kit's record: the PGID alone proves nothing
    res = _clean(tmp_path)
    assert res.returncode == 0 and "holds no start time" in res.stdout
    assert stranger.poll() is None


def test_gate_does_not_blame_a_reused_pgid(tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    d = tmp_path / "kit" / "servers"
    _record(tmp_path, stranger.pid, start_ticks=(start_ticks(stranger.pid) or 0) - 100, cmdline=["x"])
    check = check_process_groups(run_id="new-run", phase="before", directory=d)
    assert check.ok, check.message
    assert check.message == "no blocking kit server process group; removed 1 stale record(s) of group(s) already gone"
    assert stranger.poll() is None


def test_matching_record_is_still_stopped(tmp_path: Path, stranger: subprocess.Popen[bytes]) -> None:
    _record(tmp_path, stranger.pid, start_ticks=start_ticks(stranger.pid), cmdline=cmdline(stranger.pid))
    d = tmp_path / "kit" / "servers"
    assert not check_process_groups(run_id="new-run", phase="before", directory=d).ok
    res = _clean(tmp_path)
    assert res.returncode == 0 and len(_stopped(res.stdout, stranger.pid)) == 1, res.stdout
    assert stranger.wait(timeout=10) is not None
