"""stop_group on a real process group: SIGTERM, grace, SIGKILL for a child that ignores SIGTERM, proof."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.plumbing.poll import poll_until
from kit.plumbing.procs import group_alive, group_members, signal_group, start_ticks, stop_group
from kit.runtime.records import read_record

STUBBORN = (
    "import signal, subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "print(1, flush=True); time.sleep(600)'])\n"
    "time.sleep(600)\n"
)


def _group(code: str, members: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    assert poll_until(lambda: len(group_members(proc.pid)) == members, 10.0), "the group did not start"
    time.sleep(0.3)  # let the child install its SIGTERM handler
    return proc


def test_a_child_ignoring_sigterm_is_killed_after_the_grace() -> None:
    proc = _group(STUBBORN, 2)
    t0 = time.monotonic()
    ended = stop_group(proc.pid, 0.5, reap=proc.poll)
    assert ended.signal == "SIGKILL" and ended.left == []
    assert 0.5 <= time.monotonic() - t0 < 5.0
    assert not group_alive(proc.pid) and group_members(proc.pid) == []
    assert proc.poll() is not None  # our own child was reaped, not left a zombie


def test_a_group_that_obeys_sigterm_gets_no_sigkill() -> None:
    proc = _group("import time; time.sleep(600)", 1)
    ended = stop_group(proc.pid, 5.0, reap=proc.poll)
    assert ended.signal == "SIGTERM" and ended.left == []
    assert proc.wait(5) == -15


def test_a_group_already_gone_is_not_signalled() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait()
    ended = stop_group(proc.pid, 1.0)
    assert ended.signal is None and ended.left == []


def test_groups_0_and_1_are_never_signalled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``killpg(1, sig)`` is ``kill(-1, sig)``: every process the caller may signal (as root: the machine). A server
    record naming group 1 (forged, or corrupt) with init's start time passed the identity check, so ``kit clean``
    would have stopped "group 1". Such a record now reads as unreadable, and the one signalling function refuses.
    (``os.killpg`` is spied on: a test of the real call could only fail by killing the machine.)"""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: sent.append((pgid, sig)))
    for pgid in (0, 1, -3):
        with pytest.raises(ValueError, match=f"process group {pgid} is never a server's"):
            signal_group(pgid, signal.SIGTERM)
        with pytest.raises(ValueError):
            stop_group(pgid, 0.1)
    assert sent == []
    for pgid in (0, 1):
        path = tmp_path / f"{pgid}.json"
        path.write_text(json.dumps({"pgid": pgid, "start_ticks": start_ticks(1) or 0, "started": "x"}))
        assert read_record(path) is None
    path = tmp_path / "2.json"
    path.write_text(json.dumps({"pgid": 2}))
    assert read_record(path) == {"pgid": 2}
