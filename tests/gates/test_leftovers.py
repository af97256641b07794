"""The leftover gates: a real process group registered as a kit server, and containers by label."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from gate_helpers import FakeContainer, FakeDocker, make_manifest, write_record

from kit.gates import run_gates
from kit.gates.leftovers import check_containers, check_process_groups
from kit.runtime.records import state_dir


def test_live_group_of_another_run_fails_then_passes_once_killed(state_home: Path) -> None:
    assert state_dir() == state_home
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        record = write_record(state_home, server.pid, run_id="old-run")
        check = check_process_groups(run_id="new-run", phase="before")
        assert not check.ok
        assert f"process group {server.pid} (run old-run, cell a-r1" in check.message
        assert f"PID {server.pid} sleep" in check.message
        assert check.hint == f"kit clean, or kill -TERM -- -{server.pid}"
        assert check.evidence["blocking"] == [server.pid]
        assert record.exists()
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    check = check_process_groups(run_id="new-run", phase="before")
    assert check.ok, check.message
    assert "removed 1 stale record" in check.message
    assert not record.exists()
    assert check.evidence["stale"][0]["pgid"] == server.pid and check.evidence["stale"][0]["removed"] is True


def test_own_run_blocks_before_and_after_other_runs_only_before(state_home: Path) -> None:
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        write_record(state_home, server.pid, run_id="this-run")
        assert not check_process_groups(run_id="this-run", phase="before").ok
        assert not check_process_groups(run_id="this-run", phase="after").ok
        assert not check_process_groups(run_id="other-run", phase="before").ok
        after = check_process_groups(run_id="other-run", phase="after")
        assert after.ok and after.evidence["live"]  # recorded as evidence, blocks the next start instead
        assert not check_process_groups(run_id=None, phase="doctor").ok  # doctor: everything counts
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_zombie_only_group_is_stale(state_home: Path) -> None:
    server = subprocess.Popen(["true"], start_new_session=True)
    os.waitid(os.P_PID, server.pid, os.WEXITED | os.WNOWAIT)  # exited, not yet reaped: a zombie
    try:
        record = write_record(state_home, server.pid, run_id="old")
        assert check_process_groups(run_id="new", phase="before").ok
        assert not record.exists()
    finally:
        server.wait()


def test_unreadable_record_is_noted_not_deleted(state_home: Path) -> None:
    bad = state_home / "half-written.json"
    bad.write_text("{")
    check = check_process_groups(run_id=None, phase="doctor")
    assert check.ok and check.evidence["unreadable"] == [str(bad)] and bad.exists()


def test_missing_state_dir_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "nowhere"))
    assert check_process_groups(run_id=None, phase="doctor").ok


def _kit_container(run: str, cid: str = "c0ffee" * 10 + "abcd") -> FakeContainer:
    return FakeContainer(id=cid, name=f"kit-{run}-a-r1", labels={"kit.run": run, "kit.cell": "a-r1"})


def test_container_of_another_run_fails() -> None:
    client = FakeDocker([_kit_container("old")])
    check = check_containers(make_manifest(runtime="docker"), run_id="new", phase="before", client=client)
    assert not check.ok
    assert "1 kit container(s) still running: kit-old-a-r1 (c0ffeec0ffee, run old, cell a-r1)" in check.message
    assert check.hint == "kit clean, or docker rm -f c0ffeec0ffee"
    assert client.calls == [{"label": "kit.run"}]


def test_container_of_this_run_blocks_always_of_another_run_not_after_a_stop() -> None:
    client = FakeDocker([_kit_container("this")])
    m = make_manifest(runtime="docker")
    assert not check_containers(m, run_id="this", phase="before", client=client).ok
    assert not check_containers(m, run_id="this", phase="after", client=client).ok
    assert not check_containers(m, run_id="other", phase="before", client=client).ok
    assert check_containers(m, run_id="other", phase="after", client=client).ok


def test_docker_unreachable_is_skipped_for_the_process_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    check = check_containers(make_manifest(runtime="process"), run_id=None, phase="doctor")
    assert check.ok and check.evidence["skipped"] is True
    assert check.message.startswith("skipped: Docker not reachable (")


def test_docker_unreachable_fails_for_the_docker_runtime(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    check = check_containers(make_manifest(runtime="docker"), run_id=None, phase="doctor")
    assert not check.ok
    assert "Docker not reachable" in check.message and "runtime is docker" in check.message
    assert check.hint and "start the Docker engine" in check.hint


def test_run_gates_reports_every_leftover(state_home: Path) -> None:
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        write_record(state_home, server.pid, run_id="old")
        report = run_gates(make_manifest(), phase="before", run_id="new",
                           docker_client=FakeDocker([_kit_container("old")]))
        assert [c.name for c in report.checks if not c.ok] == ["leftover_containers", "leftover_processes"]
        line = json.dumps(report.as_dict())
        assert str(server.pid) in line
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_group_that_outlives_sigkill_keeps_its_record(state_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process in uninterruptible sleep (D state: a hung NFS or GPU driver call) outlives SIGKILL; it cannot be
    made on demand, so stop_group's answer for it is stood in. Its record stays for the gate and a later clean."""
    from kit.plumbing.procs import GroupStop
    from kit.runtime import leftovers as process

    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        record = write_record(state_home, server.pid, "run-a")
        monkeypatch.setattr(process, "stop_group", lambda pgid, grace_s, **_: GroupStop("SIGKILL", [pgid]))
        out = process.kill_leftover_groups(run_id="run-a")
        assert out.stopped == [] and record.exists()
        assert len(out.survived) == 1 and f"processes [{server.pid}] still there after SIGKILL" in out.survived[0]
        assert not check_process_groups(run_id="new-run", phase="before").ok
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def test_a_server_whose_kit_lives_is_no_leftover_whatever_lock_directory_it_used(state_home: Path) -> None:
    """A review: run A under KIT_LOCK_DIR=/elsewhere; `kit clean` in a plain shell (the default lock directory)
    found no run lock of A's, stopped A's live server and A failed its cell. The record names the kit process that
    started the server (pid and start time): while it lives, the server is that run's."""
    from kit.cleanup import clean_all
    from kit.plumbing.procs import start_ticks

    kit = subprocess.Popen(["sleep", "600"], start_new_session=True)  # stands for run A's kit process
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        record = write_record(state_home, server.pid, run_id="run-a")
        doc = json.loads(record.read_text())
        record.write_text(json.dumps({**doc, "kit_pid": kit.pid, "kit_start_ticks": start_ticks(kit.pid)}))
        check = check_process_groups(run_id="new-run", phase="before")
        assert check.ok, check.message
        assert "run run-a (kit pid" in check.message and "left alone" in check.message
        out = clean_all(client=None)
        assert out["server_process_groups"] == [] and server.poll() is None and record.exists()
        kit.kill()
        kit.wait()  # its kit is gone: now the server is a leftover
        check = check_process_groups(run_id="new-run", phase="before")
        assert not check.ok and check.evidence["blocking"] == [server.pid]
    finally:
        for p in (kit, server):
            p.kill()
            p.wait()
