"""Reservations and live runs: another kit process (a real one, holding real flocks) reserves a run's ports
and GPUs; this process sees whose they are, the gates and `kit clean` leave that run's servers and containers
alone, and everything of it counts as a leftover again once that process is SIGKILLed (the kernel drops its
locks; its pid and start time no longer match).

The docker path is the same logic over container labels, tested here with a stand-in client (the docker tier
is not run here)."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from docker.errors import NotFound
from gate_helpers import FakeContainer, make_manifest, write_record
from support.ports import free_port

from kit.cleanup import clean, clean_all, refuse_live_runs, stop_run_leftovers
from kit.errors import GateFailed
from kit.gates.leftovers import check_containers, check_process_groups
from kit.gates.ports import check_ports
from kit.gates.reserve import reserve
from kit.plumbing.poll import poll_until
from kit.runtime.records import live_owner, run_lock_path

ME = pwd.getpwuid(os.geteuid()).pw_name  # the user owner_text names: the run lock's owner
ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys, time
from pathlib import Path
from support.manifests import manifest_data, manifest_model
from kit.gates.reserve import reserve
m = manifest_model(manifest_data("holder", port=int(sys.argv[1]), command=["true"], served_name="m",
                                 hardware={"gpus": int(sys.argv[2])}))
reserve(m, "other1", Path("/results/holder-bundle"))
print("held", flush=True)
time.sleep(600)
"""


@dataclass
class Holder:
    proc: subprocess.Popen[str]
    port: int

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def holder(state_home: Path) -> Iterator[Holder]:
    """Another kit process running run ``other1`` on one port and GPU 0 (it holds the reservations)."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(port), "1"], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    h = Holder(proc, port)
    yield h
    h.kill()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_a_reserved_port_or_gpu_is_refused_naming_the_live_run(holder: Holder) -> None:
    owner = live_owner("other1")
    assert owner is not None and owner["pid"] == holder.proc.pid and owner["ports"] == [holder.port]
    whose = f"run other1 (kit pid {holder.proc.pid}, user {ME}, experiment holder, bundle /results/holder-bundle)"
    with pytest.raises(GateFailed) as e:
        reserve(make_manifest(port=holder.port), "mine", Path("/b"))
    assert e.value.message == f"port {holder.port} is reserved by {whose}, which is still running"
    assert "kit clean` leaves a live run alone" in (e.value.hint or "")
    for gpus in (1, "all"):
        with pytest.raises(GateFailed, match=f"reserved by run other1 \\(kit pid {holder.proc.pid}"):
            reserve(make_manifest(gpus=gpus), "mine", Path("/b"))
    assert live_owner("mine") is None and not run_lock_path("mine").exists()  # a refusal keeps nothing
    free = reserve(make_manifest(), "mine", Path("/b"))  # disjoint port, no GPU: both runs share the host
    try:
        assert live_owner("mine") is not None
    finally:
        free.release()
    assert live_owner("mine") is None and not run_lock_path("mine").exists()


def test_the_port_gate_fails_at_once_for_a_port_another_run_reserved(holder: Holder) -> None:
    check = check_ports(make_manifest(port=holder.port, port_deadline_s=30))  # nothing listens on it now
    assert not check.ok and check.evidence["polls"] == 0
    assert f"port {holder.port} is reserved by run other1 (kit pid {holder.proc.pid}" in check.message
    assert check.hint is not None and "kit clean` leaves a live run alone" in check.hint


def test_servers_of_a_live_run_are_no_leftovers_and_become_leftovers_when_its_kit_dies(
        holder: Holder, state_home: Path) -> None:
    server = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        record = write_record(state_home, server.pid, run_id="other1")
        check = check_process_groups(run_id="new-run", phase="before")
        assert check.ok and check.hint is None, check.message
        assert f"left alone: run other1 (kit pid {holder.proc.pid}" in check.message
        assert [g["pgid"] for g in check.evidence["of_live_runs"]] == [server.pid]
        out = clean_all(client=StandInDocker())
        assert out["server_process_groups"] == [] and server.poll() is None and record.exists()
        assert out["live_run_server_groups_left_alone"] == [
            f"group {server.pid} (cell a-r1): run other1 (kit pid {holder.proc.pid}, user {ME}, experiment holder, "
            "bundle /results/holder-bundle), still running"]
        holder.kill()  # SIGKILL: the kernel drops its locks, its pid is gone
        assert live_owner("other1") is None
        after = check_process_groups(run_id="new-run", phase="before")
        assert not after.ok and after.hint == f"kit clean, or kill -TERM -- -{server.pid}"
        out = clean_all(client=StandInDocker())
        assert [g.split(":")[0] for g in out["server_process_groups"]] == [f"group {server.pid} (run other1, cell a-r1)"]
        assert out["stale_run_locks"] == ["run-other1.lock (run other1, its kit is gone)"]
        assert poll_until(lambda: server.poll() is not None, 10), "kit clean did not stop the dead run's server"
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait()


@dataclass
class StandInContainer(FakeContainer):
    owner: StandInDocker | None = None
    short_id: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)

    def remove(self, force: bool = False, v: bool = False) -> None:
        assert self.owner is not None
        self.owner.running.remove(self)


@dataclass
class StandInDocker:
    """Enough of docker.DockerClient for kit clean and the leftover gate: list, get, remove."""

    running: list[StandInContainer] = field(default_factory=list)

    @property
    def containers(self) -> StandInDocker:
        return self

    def list(self, all: bool = False, filters: dict[str, Any] | None = None) -> list[StandInContainer]:
        labels = (filters or {}).get("label") or []
        wanted = [labels] if isinstance(labels, str) else labels
        return [c for c in self.running if not [w for w in wanted if not _has(c, w)]]

    def get(self, cid: str) -> StandInContainer:
        found = [c for c in self.running if c.id == cid]
        if not found:
            raise NotFound(cid)
        return found[0]

    def add(self, run: str, cid: str) -> StandInContainer:
        c = StandInContainer(id=cid, name=f"kit-{run}", short_id=cid[:12],
                             labels={"kit.managed": "1", "kit.run": run, "kit.cell": "a-r1"}, owner=self)
        c.attrs = {"State": {"Status": "running"}, "NetworkSettings": {"Ports": {}}, "HostConfig": {}}
        self.running.append(c)
        return c

    def close(self) -> None:
        pass


def _has(c: FakeContainer, label: str) -> bool:
    k, _, v = label.partition("=")
    return k in c.labels and (not v or c.labels[k] == v)


def test_containers_of_a_live_run_are_left_alone_by_the_gate_and_kit_clean(holder: Holder) -> None:
    client = StandInDocker()
    live = client.add("other1", "a" * 64)
    client.add("dead-run", "b" * 64)
    check = check_containers(make_manifest(runtime="docker"), run_id="new", phase="before", client=client)
    assert not check.ok and "run dead-run" in check.message and "run other1" not in check.message
    assert list(check.evidence["of_live_runs"]) == [live.id]
    out = clean(client=client)
    assert out["containers"] == [f"kit-dead-run ({'b' * 12}, running)"]
    assert out["live_run_containers_left_alone"] == [
        f"kit-other1 ({'a' * 12}, running): run other1 (kit pid {holder.proc.pid}, user {ME}, experiment holder, "
        "bundle /results/holder-bundle), still running"]
    assert client.running == [live]
    assert check_containers(make_manifest(runtime="docker"), run_id="new", phase="before", client=client).ok
    live.attrs["NetworkSettings"]["Ports"] = {"80/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(holder.port)}]}
    with pytest.raises(GateFailed) as e:
        refuse_live_runs(ports=[holder.port], gpus=None, client=client)
    assert f"run other1 (kit pid {holder.proc.pid}" in e.value.message and "still running" in e.value.message
    assert e.value.hint is not None and "leaves a live run alone" in e.value.hint


def test_a_resume_stops_only_its_own_runs_leftovers_and_clean_the_rest(state_home: Path) -> None:
    """One process-group stop (kit.runtime.leftovers.kill_leftover_groups) for both callers: the resume's, limited
    to its run id, leaves a dead run's group alone; `kit clean`'s stops it."""
    own, other = (subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2))
    try:
        own_record, other_record = write_record(state_home, own.pid, "run-a"), write_record(state_home, other.pid, "run-b")
        stopped = stop_run_leftovers("run-a", docker=False)
        assert [s.split(":")[0] for s in stopped] == [f"group {own.pid} (run run-a, cell a-r1)"]
        assert poll_until(lambda: own.poll() is not None, 10) and not own_record.exists()
        assert other.poll() is None and other_record.exists()
        out = clean_all(client=StandInDocker())
        assert [s.split(":")[0] for s in out["server_process_groups"]] == [f"group {other.pid} (run run-b, cell a-r1)"]
        assert poll_until(lambda: other.poll() is not None, 10) and not other_record.exists()
    finally:
        for p in (own, other):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
