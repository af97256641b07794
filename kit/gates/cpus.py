"""The CPU gate (only when the manifest pins: ``server.cpus`` or ``load.cpus``): every CPU named exists and
may be used, so a manifest written for a 16-core machine stops with exit 5 on an 8-core one instead of
failing inside a cell, or docker silently refusing the cpuset.

The process runtime and the load client can run only where kit may run (its affinity: a cgroup, taskset or
Slurm allocation may have narrowed it); a docker container only on the host's online CPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from kit.gates.result import Check, Timer
from kit.manifest import Manifest
from kit.plumbing.affinity import available_cpus, format_cpulist, parse_cpulist

NAME = "cpus"
ONLINE = Path("/sys/devices/system/cpu/online")


class CpusEvidence(TypedDict):
    server_cpus: str | None
    load_cpus: str | None
    usable: str  # the CPUs they were checked against
    missing: dict[str, str]  # "server.cpus"/"load.cpus" -> the CPUs of it that are not usable


def online_cpus() -> frozenset[int]:
    try:
        return parse_cpulist(ONLINE.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return available_cpus()


def check_cpus(m: Manifest) -> Check | None:
    """None when nothing is pinned (no gate to run)."""
    if not (m.server.cpus or m.load.cpus):
        return None
    t = Timer()
    mine = available_cpus()
    server_pool = online_cpus() if m.runtime == "docker" else mine
    missing: dict[str, str] = {}
    for field, value, pool in (("server.cpus", m.server.cpus, server_pool), ("load.cpus", m.load.cpus, mine)):
        if value and (gone := parse_cpulist(value) - pool):
            missing[field] = format_cpulist(gone)
    usable = format_cpulist(mine | (server_pool if m.server.cpus else frozenset()))
    evidence = CpusEvidence(server_cpus=m.server.cpus, load_cpus=m.load.cpus, usable=usable, missing=missing)
    if missing:
        what = "; ".join(f"{f} names CPU(s) {c}" for f, c in missing.items())
        return t.check(NAME, False, f"{what}, which this machine does not let kit use (it may use {usable})",
                       "edit the manifest's cpus for this machine (and sign it again), or run kit where those CPUs "
                       "exist (not under a narrower taskset, cgroup or Slurm allocation)", evidence)
    pinned = ", ".join(f"{f} {v}" for f, v in (("server", m.server.cpus), ("load", m.load.cpus)) if v)
    return t.check(NAME, True, f"CPUs available ({pinned}; kit may use {usable})", None, evidence)
