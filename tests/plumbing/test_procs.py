"""stop_group on a real process group: SIGTERM, grace, SIGKILL for a child that ignores SIGTERM, proof."""

from __future__ import annotations

import subprocess
import sys
import time

from kit.plumbing.poll import poll_until
from kit.plumbing.procs import group_alive, group_members, stop_group

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
