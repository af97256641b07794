"""CPU lists and pinning, checked against the kernel: util-linux's taskset sets a list and the kernel spells
back what it applied in /proc/PID/status (Cpus_allowed_list); kit's parser and formatter must agree with both."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from kit.plumbing.affinity import available_cpus, format_cpulist, parse_cpulist, pinned, process_cpus


def test_parse_and_format_round_trip() -> None:
    assert parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist(parse_cpulist("11,10,0-3, 8,2")) == "0-3,8,10-11"
    assert format_cpulist({5}) == "5" and format_cpulist({4, 5}) == "4-5"
    rng = random.Random(7)
    for _ in range(300):
        cpus = frozenset(rng.sample(range(200), rng.randint(1, 60)))
        assert parse_cpulist(format_cpulist(cpus)) == cpus


@pytest.mark.parametrize(("text", "why"), [("", "not a CPU list"), ("a-b", "not a CPU list"), ("1,,2", "not a CPU"),
                                           ("3-1", "runs backwards"), ("0-9000", "beyond"), ("-1", "not a CPU")])
def test_bad_lists_say_what_is_wrong(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_cpulist(text)


def _sleeper_under(cmd_prefix: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*cmd_prefix, sys.executable, "-c", "import time; time.sleep(30)"])


@pytest.mark.skipif(not shutil.which("taskset"), reason="util-linux taskset not installed")
def test_kernel_and_taskset_spell_lists_as_kit_does() -> None:
    mine = sorted(available_cpus())
    for chosen in ({mine[0]}, set(mine), set(mine[::2])):
        text = ",".join(str(c) for c in sorted(chosen))  # unformatted on purpose
        p = _sleeper_under(["taskset", "-c", text])
        try:
            time.sleep(0.2)
            assert process_cpus(p.pid) == format_cpulist(parse_cpulist(text))
        finally:
            p.kill()
            p.wait()
    assert process_cpus(p.pid) is None  # gone (reaped): no record


def test_pinned_child_and_its_children_run_only_there_and_kit_is_untouched() -> None:
    mine = available_cpus()
    one = frozenset({max(mine)})
    before = os.sched_getaffinity(0)
    code = ("import os, subprocess, sys; c = subprocess.run([sys.executable, '-c', "
            "'import os; print(sorted(os.sched_getaffinity(0)))'], capture_output=True, text=True).stdout.strip(); "
            "print(sorted(os.sched_getaffinity(0)), c)")
    with pinned(one):
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert p.stdout.split() == [f"[{max(mine)}]", f"[{max(mine)}]"]
    assert os.sched_getaffinity(0) == before
    with pinned(None):
        q = subprocess.run([sys.executable, "-c", "import os; print(len(os.sched_getaffinity(0)))"],
                           capture_output=True, text=True, check=True)
    assert int(q.stdout) == len(before)
