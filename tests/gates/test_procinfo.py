"""Naming processes from /proc: container ids from cgroups, and the fix commands."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from kit.gates.procinfo import container_of, describe, fix_commands, fix_text, short

CID = "4b4b4b9c7510" + "a" * 52


@pytest.mark.parametrize("cgroup", [
    f"12:memory:/docker/{CID}\n",  # cgroup v1
    f"0::/system.slice/docker-{CID}.scope\n",  # cgroup v2, systemd driver
    f"0::/kubepods/besteffort/pod1/cri-containerd-{CID}.scope\n",
])
def test_container_of_reads_the_cgroup(tmp_path: Path, cgroup: str) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text(cgroup)
    found = container_of(42, proc=tmp_path)
    assert found is not None and found["id"] == CID


def test_host_process_has_no_container(tmp_path: Path) -> None:
    (tmp_path / "42").mkdir()
    (tmp_path / "42" / "cgroup").write_text("0::/user.slice/session-1.scope\n")
    assert container_of(42, proc=tmp_path) is None
    assert container_of(43, proc=tmp_path) is None  # gone


def test_describe_self() -> None:
    me = describe(os.getpid())
    assert me["visible"] and me["pgid"] == os.getpgrp() and me["cmdline"] and me["name"]
    assert short(me).startswith(f"PID {os.getpid()} {me['name']} (user ")


def test_fix_commands() -> None:
    in_container = {"pid": 10, "visible": True, "pgid": 10, "container": {"runtime": "docker", "id": CID}}
    group = {"pid": 19, "visible": True, "pgid": 19, "container": None}  # leads its group: its workers go with it
    same_group = {"pid": 21, "visible": True, "pgid": 19, "container": None}
    mine = {"pid": 30, "visible": True, "pgid": os.getpgrp(), "container": None}
    hidden = {"pid": 40, "visible": False, "pgid": None, "container": None}
    assert fix_commands([in_container, group, same_group, mine, hidden]) == [
        "docker rm -f 4b4b4b9c7510", "kill -TERM -- -19", "kill -TERM 30"]
    assert fix_text([hidden]) == "kit clean"  # perhaps in a container of kit's
    assert fix_text([group]) == "kill -TERM -- -19"  # no server kit recorded: kit clean would not stop it
    assert fix_text([in_container]) == "kit clean, or docker rm -f 4b4b4b9c7510"
    assert short(in_container | {"name": "python3", "user": "root"}) == (
        "PID 10 python3 (user root, pgid 10, docker container 4b4b4b9c7510)")


def test_a_group_led_by_another_live_process_is_not_stopped_whole() -> None:
    """Started in the background by a script (or a terminal) whose group it shares: `kill -- -PGID` would end the
    script too (a review pasted such a hint under `timeout`), so it is named alone, unless kit recorded the group;
    a group whose leader is gone (orphans of a killed job) is theirs, and stopped whole."""
    script = subprocess.Popen(["sleep", "60"])  # a live leader that is not listed
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: no process has that pid (a reuse within the test would only make the hint narrower)
    try:
        background = {"pid": 22, "visible": True, "pgid": script.pid, "container": None}
        sibling = {"pid": 23, "visible": True, "pgid": script.pid, "container": None}
        assert fix_commands([background, sibling]) == ["kill -TERM 22 23"]
        assert fix_commands([background], recorded={script.pid}) == [f"kill -TERM -- -{script.pid}"]
        orphan = {"pid": 24, "visible": True, "pgid": gone.pid, "container": None}
        assert fix_commands([orphan]) == [f"kill -TERM -- -{gone.pid}"]
    finally:
        script.kill()
        script.wait()


def test_fix_commands_never_signal_init_s_group_or_dockerd_s(dockerd: int) -> None:
    """``kill -TERM -- -1`` signals every process the user may signal; a ``docker-proxy`` is in dockerd's group."""
    under_init = {"pid": 50, "visible": True, "pgid": 1, "container": None}
    proxy = {"pid": 60, "visible": True, "pgid": dockerd, "container": None, "name": "docker-proxy",
             "cmdline": "/usr/sbin/docker-proxy -proto tcp -host-ip 0.0.0.0 -host-port 18999 -container-ip "
                        "172.17.0.2 -container-port 8000"}
    assert fix_commands([under_init, proxy, proxy | {"pid": 61}]) == [
        "docker rm -f $(docker ps -q --filter publish=18999)", "kill -TERM 50"]
    assert fix_commands([proxy | {"cmdline": "docker-proxy -host-port 99999"}]) == ["kill -TERM 60"]  # not dockerd's
    assert fix_commands([proxy | {"name": "python3"}]) == ["kill -TERM 60"]  # only dockerd's proxy is named so
    assert fix_commands([proxy | {"name": "python3", "pid": dockerd}]) == [f"kill -TERM -- -{dockerd}"]


@pytest.fixture
def dockerd() -> Iterator[int]:
    """A live process standing for dockerd, the leader of the proxy's group."""
    leader = subprocess.Popen(["sleep", "60"])
    yield leader.pid
    leader.kill()
    leader.wait()


def test_fix_text_offers_kit_clean_only_for_a_container_kit_labelled() -> None:
    ref = {"runtime": "docker", "id": CID, "name": "web"}
    theirs = {"pid": 10, "visible": True, "pgid": 10, "container": ref | {"kit": False}}
    kits = {"pid": 10, "visible": True, "pgid": 10, "container": ref | {"kit": True}}
    assert fix_text([theirs]) == "docker rm -f 4b4b4b9c7510"
    assert fix_text([kits]) == "kit clean, or docker rm -f 4b4b4b9c7510"
    assert short(theirs | {"name": "nginx", "user": "root"}) == (
        "PID 10 nginx (user root, pgid 10, docker container 4b4b4b9c7510 web)")
