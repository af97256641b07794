"""CPU affinity: the Linux CPU-list syntax (``0-3,8,10-11``) and starting a child pinned to a set of CPUs.

A launch-bound server (eager PyTorch decoding: a decode step is thousands of small kernel launches) runs at
the speed of the core the scheduler happens to put its Python thread on; where the load client, kit and
other processes share those cores, identical servers differ from cell to cell. ``server.cpus`` and
``load.cpus`` give each its own cores.

``pinned(cpus)`` sets the *calling thread's* affinity (Linux keeps affinity per thread) around a fork, so
the child starts pinned before it runs a single instruction of its own: no race with threads it starts
early, and no other thread of kit is affected. The child may narrow it further, never widen it past a
cgroup's cpuset.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

_LIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
MAX_CPU = 8191  # the kernel's CONFIG_NR_CPUS maximum


def parse_cpulist(text: str) -> frozenset[int]:
    """``"0-3,8"`` -> {0, 1, 2, 3, 8}; ValueError naming what is wrong."""
    s = text.replace(" ", "")
    if not _LIST_RE.match(s):
        raise ValueError(f"{text!r} is not a CPU list: give CPU numbers and ranges like '0-7' or '2,4-6'")
    cpus: set[int] = set()
    for part in s.split(","):
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if b < a:
            raise ValueError(f"{text!r}: the range {part} runs backwards (write {b}-{a})")
        if b > MAX_CPU:
            raise ValueError(f"{text!r}: CPU {b} is beyond any Linux machine's last CPU ({MAX_CPU})")
        cpus.update(range(a, b + 1))
    return frozenset(cpus)


def format_cpulist(cpus: frozenset[int] | set[int]) -> str:
    """{0, 1, 2, 3, 8} -> ``"0-3,8"`` (the kernel's own spelling, as in /proc/PID/status)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(cpus):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def available_cpus() -> frozenset[int]:
    """The CPUs this process may run on (its affinity mask: a cgroup or taskset may have narrowed it)."""
    return frozenset(os.sched_getaffinity(0))


def missing_cpus(cpus: frozenset[int]) -> frozenset[int]:
    """Those of ``cpus`` this process may not run on: a child cannot be pinned to them."""
    return cpus - available_cpus()


@contextmanager
def pinned(cpus: frozenset[int] | None) -> Iterator[None]:
    """Within the block, the calling thread (and so every child it forks) runs on ``cpus`` only."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def process_cpus(pid: int) -> str | None:
    """The kernel's record of a live process's allowed CPUs (``Cpus_allowed_list``), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None
