"""The port gate: every port the server binds or publishes is free on the exact address it will use.

The test is a ``bind()`` with SO_REUSEADDR (so TIME_WAIT sockets don't read as busy), on ``server.host``;
for 0.0.0.0 also on ``::`` when the host has IPv6, for ``::`` on both. A busy port is polled until
``gates.port_deadline_s``; then the gate names the listener's owner where /proc (through psutil, or
``ss``) can tell. A port another live kit run has reserved (``kit.gates.reserve``) fails at once, naming
that run: it is taken between that run's cells too, when nothing listens on it.
"""

from __future__ import annotations

import errno
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import NotRequired, TypedDict

import psutil

from kit.gates import behind, procinfo
from kit.gates.procinfo import ProcInfo
from kit.gates.reserve import port_holders
from kit.gates.result import Check, Timer
from kit.manifest import Manifest
from kit.plumbing.poll import poll_until
from kit.runtime.records import RunOwner, owner_text

NAME = "ports"
POLL_S = 0.020
_LISTEN = "0A"


class Listener(TypedDict):
    """A listening socket on a busy port and who holds it (``via: "ss"`` when only ``ss`` could tell)."""

    address: str | None
    inode: int | None
    processes: NotRequired[list[ProcInfo]]
    via: NotRequired[str]


class BusyPort(TypedDict):
    address: str
    port: int
    error: str  # errno name: EADDRINUSE, EACCES, EADDRNOTAVAIL, ...


class PortsEvidence(TypedDict):
    host: str
    addresses: list[str]
    ports: list[int]
    deadline_s: float
    polls: int
    waited_s: float
    busy: NotRequired[list[BusyPort]]
    owners: NotRequired[dict[str, list[Listener]]]
    reserved: NotRequired[dict[str, RunOwner]]  # port -> the live run of another kit that reserved it
    of_live_runs: NotRequired[dict[str, RunOwner]]  # listener pid -> the live run (of another kit) it serves


def has_ipv6() -> bool:
    try:
        return bool(Path("/proc/net/if_inet6").read_text().strip())
    except OSError:
        return False


def bind_addresses(host: str) -> list[str]:
    """The addresses to test for a server bound or published on ``host``."""
    if host == "0.0.0.0":
        return ["0.0.0.0", "::"] if has_ipv6() else ["0.0.0.0"]
    if host == "::":
        return ["::", "0.0.0.0"]
    return [host]


def try_bind(address: str, port: int) -> str | None:
    """None when ``address:port`` can be bound now; else the errno name (EADDRINUSE, EACCES, ...)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError as e:
            return errno.errorcode.get(e.errno or 0, str(e))
    return None


def _decode_address(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, words)


def listening_sockets(port: int, proc: Path = procinfo.PROC) -> list[Listener]:
    """Listening TCP sockets on ``port`` in this network namespace: {address, inode}."""
    found: list[Listener] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            addr, port_hex = fields[1].rsplit(":", 1)
            if int(port_hex, 16) == port:
                found.append(Listener(address=_decode_address(addr), inode=int(fields[9])))
    return found


def _ss_owners(port: int) -> list[int]:
    ss = shutil.which("ss")
    if ss is None:
        return []
    try:
        cmd = [ss, "-ltnpH", f"sport = :{port}"]
        out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({int(p) for p in re.findall(r"pid=(\d+)", out)})


def _listener_pids(port: int) -> dict[str, list[int]]:
    """Listening address -> PIDs holding a socket listening on it and ``port`` (psutil reads /proc/net
    and every process's fds; processes we may not inspect are missing, as with ``ss``)."""
    out: dict[str, list[int]] = {}
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status != psutil.CONN_LISTEN or not conn.laddr or conn.laddr.port != port or conn.pid is None:
            continue
        pids = out.setdefault(conn.laddr.ip, [])
        if conn.pid not in pids:
            pids.append(conn.pid)
    return out


def owners(port: int) -> list[Listener]:
    """Who listens on ``port``: one entry per listening socket with the processes holding it."""
    sockets = listening_sockets(port)
    by_address = _listener_pids(port) if sockets else {}
    for s in sockets:
        s["processes"] = [procinfo.describe(pid) for pid in by_address.get(s["address"] or "", [])]
    if not any(s.get("processes") for s in sockets):
        pids = _ss_owners(port)
        if pids:
            procs = [procinfo.describe(p) for p in pids]
            sockets.append(Listener(address=None, inode=None, via="ss", processes=procs))
    return sockets


def _busy(targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    out = {}
    for address, port in targets:
        reason = try_bind(address, port)
        if reason is not None:
            out[(address, port)] = reason
    return out


def check_ports(m: Manifest, *, ports: list[int] | None = None, host: str | None = None, name: str = NAME) -> Check:
    """Every port free on the address it will be bound on: by default server.port, server.extra_ports and
    gates.ports on server.host (``ports``/``host`` name others: a node's share, rank 0's rendezvous port)."""
    timer = Timer()
    ports = [m.server.port, *m.server.extra_ports, *m.gates.ports] if ports is None else ports
    host = m.server.host if host is None else host
    addresses = bind_addresses(host)
    if held := port_holders(ports):
        evidence = PortsEvidence(host=host, addresses=addresses, ports=ports, deadline_s=m.gates.port_deadline_s,
                                 polls=0, waited_s=0.0, reserved={str(p): o for p, o in held.items()})
        msg = "; ".join(f"port {p} is reserved by {owner_text(o)}, which is still running" for p, o in held.items())
        return timer.check(name, False, msg, "wait for that run to finish, or choose other ports in the manifest "
                                             "(`kit clean` leaves a live run alone)", evidence)
    targets = [(a, p) for p in ports for a in addresses]
    first = time.monotonic()
    busy: dict[tuple[str, int], str] = {}
    polls = 0

    def settled() -> bool:
        nonlocal busy, polls
        busy = _busy(targets)
        polls += 1
        # an address this host does not have will not appear by waiting
        return not busy or "EADDRNOTAVAIL" in busy.values()

    poll_until(settled, m.gates.port_deadline_s, interval=POLL_S)
    evidence = PortsEvidence(host=host, addresses=addresses, ports=ports, deadline_s=m.gates.port_deadline_s,
                             polls=polls, waited_s=round(time.monotonic() - first, 6))
    if not busy:
        msg = f"port{'s' if len(ports) != 1 else ''} {', '.join(map(str, ports))} free on {' and '.join(addresses)}"
        return timer.check(name, True, msg, None, evidence)
    return _failed(timer, busy, evidence, name)


def _failed(timer: Timer, busy: dict[tuple[str, int], str], evidence: PortsEvidence, name: str) -> Check:
    evidence["busy"] = [BusyPort(address=a, port=p, error=e) for (a, p), e in busy.items()]
    evidence["owners"] = {}
    parts: list[str] = []
    holders: list[ProcInfo] = []
    listeners_of = {port: owners(port) for port in sorted({p for _, p in busy})}
    found = [proc for ls in listeners_of.values() for s in ls for proc in s.get("processes", []) if proc.get("visible")]
    theirs = behind.live_servers(found)  # a container's through the docker-proxy that publishes its port
    if theirs:
        evidence["of_live_runs"] = {str(pid): o for pid, o in theirs.items()}
    for port, listeners in listeners_of.items():
        where = " and ".join(f"{a} ({e})" for (a, p), e in busy.items() if p == port)
        evidence["owners"][str(port)] = listeners
        procs = [proc for s in listeners for proc in s.get("processes", [])]
        mine = [proc for proc in procs if proc["pid"] not in theirs]
        holders += mine
        if procs:
            who = "; ".join(
                f"{procinfo.short(proc)} listening on {s['address'] or '?'}:{port}, command: {proc['cmdline']}"
                + (f", a server of {owner_text(theirs[proc['pid']])}, still running" if proc["pid"] in theirs else "")
                for s in listeners for proc in s.get("processes", [])
            )
        elif listeners:
            who = f"listening on {', '.join(s['address'] or '?' for s in listeners)}, owner not visible (no permission)"
        else:
            who = "no listener visible here (another network namespace, or a socket bound without listening)"
        errors = {e for (_, p), e in busy.items() if p == port}
        verb = "is in use" if errors == {"EADDRINUSE"} else "cannot be bound"
        fix = procinfo.fix_text(mine) if mine or not procs else "wait for that run to finish, or choose another port"
        parts.append(f"port {port} {verb} on {where}: {who}; fix: {fix}")
    if "EADDRNOTAVAIL" in busy.values():
        hint = "server.host must be an address of this machine (or 0.0.0.0 / ::)"
    elif theirs and not holders:
        hint = "wait for that run to finish, or choose other ports in the manifest (`kit clean` leaves a live run " \
               "alone)"
    else:
        hint = f"{procinfo.fix_text(holders)}; or choose other ports in the manifest"
        if theirs:
            hint += " (the servers of live runs named above are theirs: wait for them)"
    return timer.check(name, False, "; ".join(parts), hint, evidence)
