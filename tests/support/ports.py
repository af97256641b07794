"""Ports for test servers.

``free_port`` picks a port OUTSIDE the kernel's ephemeral range (``ip_local_port_range``): a port the
kernel handed out through ``bind(0)`` lies inside that range, so between the test picking it and the
server binding it, any outgoing connection on the machine (the load driver's own, another test's, another
process's) can be given the same port as its local end, and the server's bind then fails. Ports below the
range are never handed out implicitly, so only an explicit bind can take them; the candidates are
probed with the same SO_REUSEADDR bind a server does, split between pytest-xdist workers (each its own
residue class), and spread by pid so parallel sessions rarely meet.
"""

from __future__ import annotations

import itertools
import os
import random
from pathlib import Path

from kit.plumbing.net import port_bindable

_LOW = 20000  # above the usual well-known service ports


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return lo, hi


def _worker() -> tuple[int, int]:
    """(this pytest-xdist worker's index, the workers' count); (0, 1) outside xdist."""
    name, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if name.startswith("gw") and name[2:].isdigit() and count.isdigit() and int(count) > 0:
        return int(name[2:]) % int(count), int(count)
    return 0, 1


def _candidates() -> list[int]:
    lo, hi = _ephemeral_range()
    # below the range; when it starts too low for that, above it
    ports = list(range(_LOW, lo)) if lo - _LOW >= 1000 else list(range(hi + 1, 65536))
    # Each xdist worker its own share: a port is free between a run's cells (the gate checks it, the next server
    # binds it), and another worker probing it then would take it (CI, stop 35: a second cell's server found its
    # port taken, "address already in use"); with shares, only a process outside the tests can.
    index, count = _worker()
    ports = [p for p in ports if p % count == index]
    random.Random(os.getpid()).shuffle(ports)
    return ports


_NEXT = itertools.cycle(_candidates())


def free_port(host: str = "127.0.0.1") -> int:
    """A port outside the ephemeral range that a server can bind on ``host`` now (never the same twice in a row)."""
    for _ in range(1000):
        port = next(_NEXT)
        if port_bindable(host, port):
            return port
    raise RuntimeError("no free port outside the ephemeral range")
