"""Who made a container or a server (``kit.runtime.records``: ``Maker``, ``maker_labels``, ``labelled_owner``,
``other_live_owner``): a live run's container or server is never a leftover while its kit lives, whatever lock
directory it used, and nothing else is taken for one. The "other kit" here is a real process (a ``sleep``) whose
pid and start time the labels name; the reader is this process, with its own lock directory (tests/conftest.py).
A fresh-eyes review of the first version (labels of pid, start time and boot only) found the cases below."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from support.kits import labels_of

from kit.plumbing.poll import poll_until
from kit.plumbing.procs import start_ticks, stat_fields
from kit.runtime.records import (
    ServerRecord,
    boot_id,
    labelled_owner,
    maker,
    maker_labels,
    other_live_owner,
    runs_dir,
    same_process,
)


def test_a_live_kit_in_another_lock_directory_owns_its_container(other_kit: subprocess.Popen[bytes]) -> None:
    owner = labelled_owner(labels_of(other_kit))
    assert owner is not None and owner["pid"] == other_kit.pid and owner["run_id"] == "run-a"


@pytest.mark.parametrize(("label", "value", "why"), [
    ("kit.lock_dir", "HERE", "its lock would be in this directory: the lock is gone, the run has ended"),
    ("kit.pidns", "pid:[1]", "another PID namespace: its pid names another process here"),
    ("kit.boot", "another-boot", "another boot"),
    ("kit.boot", "", "no boot"),
    ("kit.pidns", "", "no namespace"),
    ("kit.start_ticks", "", "no start time"),
    ("kit.start_ticks", "12", "another start time: the pid was reused"),
    ("kit.pid", "-1", "not a pid"),
    ("kit.pid", "1" * 30, "not a pid"),
    ("kit.pid", "\u0661\u0662", "Arabic-Indic digits"),
])
def test_labels_that_do_not_prove_a_live_kit_here_prove_nothing(other_kit: subprocess.Popen[bytes], label: str,
                                                                   value: str, why: str) -> None:
    value = os.path.realpath(runs_dir()) if value == "HERE" else value
    assert labelled_owner(labels_of(other_kit, **{label: value})) is None, why


def test_a_killed_kit_not_yet_reaped_is_no_live_kit(other_kit: subprocess.Popen[bytes]) -> None:
    """A zombie keeps its start time (its parent, here this test, has not waited for it): it has ended."""
    labels = labels_of(other_kit)
    ticks = start_ticks(other_kit.pid)
    os.kill(other_kit.pid, signal.SIGKILL)
    assert poll_until(lambda: (stat_fields(other_kit.pid) or ["gone"])[0] == "Z", 10)  # listed, as a zombie
    assert start_ticks(other_kit.pid) == ticks is not None
    assert not same_process(other_kit.pid, ticks)
    assert labelled_owner(labels) is None


def test_odd_label_values_never_raise_and_a_bad_run_id_is_never_shown(other_kit: subprocess.Popen[bytes]) -> None:
    odd: dict[str, object] = {**labels_of(other_kit), "kit.run": "x" * 100_000, "kit.boot": None}
    assert labelled_owner(odd) is None  # type: ignore[arg-type]  # a client that is not Docker's
    owner = labelled_owner({**labels_of(other_kit), "kit.run": "; rm -rf ~"})
    assert owner is not None and owner["run_id"] == "?"
    assert labelled_owner({}) is None and labelled_owner({"kit.pid": "1"}) is None


def test_kit_s_own_labels_name_this_process_and_are_never_another_run_s(tmp_path: Path) -> None:
    labels = maker_labels()
    assert labels["kit.pid"] == str(os.getpid()) and labels["kit.start_ticks"] == str(start_ticks(os.getpid()))
    assert labels["kit.pidns"] == os.readlink("/proc/self/ns/pid") and labels["kit.boot"] == boot_id()
    assert labels["kit.lock_dir"] == os.path.realpath(runs_dir())
    assert labelled_owner({**labels, "kit.run": "run-a"}) is None  # this very process: ours, not another run's


def test_a_record_whose_kit_used_this_lock_directory_is_judged_by_the_lock_alone(
        other_kit: subprocess.Popen[bytes]) -> None:
    record = ServerRecord(pgid=1, pid=1, run_id="run-a", cell="a-r1", command=["x"], started="?", boot_id=boot_id(),
                          start_ticks=None, cmdline=None)
    maker(into=record)
    record["kit_pid"], record["kit_start_ticks"] = other_kit.pid, start_ticks(other_kit.pid)
    assert other_live_owner(record) is None  # no run lock here: the run has ended, its kit lives on
    record["kit_lock_dir"] = "/elsewhere/locks"
    assert (owner := other_live_owner(record)) is not None and owner["pid"] == other_kit.pid
    del record["kit_pidns"], record["kit_lock_dir"]  # a record of an older kit: its pid and start time decide
    assert other_live_owner(record) is not None
