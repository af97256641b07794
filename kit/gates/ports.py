"""The port gate: every port the server binds or publishes is free on the exact address it will use.

The test is a ``bind()`` with SO_REUSEADDR (so TIME_WAIT sockets don't read as busy), on ``server.host``;
for 0.0.0.0 also on ``::`` when the host has IPv6, for ``::`` on both. A busy port is polled until
``gates.port_deadline_s``; then the gate names the listener's owner where /proc (or ``ss``) can tell.
"""

from __future__ import annotations

import errno
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from kit.gates import procinfo
from kit.gates.report import Check, Timer
from kit.manifest import Manifest

NAME = "ports"
POLL_S = 0.020
_LISTEN = "0A"


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


def listening_sockets(port: int, proc: Path = procinfo.PROC) -> list[dict[str, Any]]:
    """Listening TCP sockets on ``port`` in this network namespace: {address, inode}."""
    found = []
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
                found.append({"address": _decode_address(addr), "inode": int(fields[9])})
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


def owners(port: int) -> list[dict[str, Any]]:
    """Who listens on ``port``: one entry per listening socket with the processes holding it."""
    sockets = listening_sockets(port)
    by_inode = procinfo.socket_owners({s["inode"] for s in sockets if s["inode"]})
    for s in sockets:
        s["processes"] = [procinfo.describe(pid) for pid in by_inode.get(s["inode"], [])]
    if not any(s["processes"] for s in sockets):
        pids = _ss_owners(port)
        if pids:
            procs = [procinfo.describe(p) for p in pids]
            sockets.append({"address": None, "inode": None, "via": "ss", "processes": procs})
    return sockets


def _busy(targets: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    out = {}
    for address, port in targets:
        reason = try_bind(address, port)
        if reason is not None:
            out[(address, port)] = reason
    return out


def check_ports(m: Manifest) -> Check:
    timer = Timer()
    ports = [m.server.port, *m.server.extra_ports, *m.gates.ports]
    addresses = bind_addresses(m.server.host)
    targets = [(a, p) for p in ports for a in addresses]
    evidence: dict[str, Any] = {"host": m.server.host, "addresses": addresses, "ports": ports,
                                "deadline_s": m.gates.port_deadline_s}
    first = time.monotonic()
    polls = 0
    while True:
        tick = time.monotonic()
        busy = _busy(targets)
        polls += 1
        now = time.monotonic()
        # an address this host does not have will not appear by waiting
        if not busy or now - first >= m.gates.port_deadline_s or "EADDRNOTAVAIL" in busy.values():
            break
        time.sleep(max(0.0, min(tick + POLL_S, first + m.gates.port_deadline_s) - now))
    evidence.update(polls=polls, waited_s=round(now - first, 6))
    if not busy:
        msg = f"port{'s' if len(ports) != 1 else ''} {', '.join(map(str, ports))} free on {' and '.join(addresses)}"
        return timer.check(NAME, True, msg, None, evidence)
    return _failed(timer, busy, evidence)


def _failed(timer: Timer, busy: dict[tuple[str, int], str], evidence: dict[str, Any]) -> Check:
    evidence["busy"] = [{"address": a, "port": p, "error": e} for (a, p), e in busy.items()]
    parts: list[str] = []
    holders: list[dict[str, Any]] = []
    for port in sorted({p for _, p in busy}):
        where = " and ".join(f"{a} ({e})" for (a, p), e in busy.items() if p == port)
        listeners = owners(port)
        evidence.setdefault("owners", {})[str(port)] = listeners
        procs = [proc for s in listeners for proc in s["processes"]]
        holders += procs
        if procs:
            who = "; ".join(
                f"{procinfo.short(proc)} listening on {s['address'] or '?'}:{port}, command: {proc['cmdline']}"
                for s in listeners for proc in s["processes"]
            )
        elif listeners:
            who = f"listening on {', '.join(s['address'] for s in listeners)}, owner not visible (no permission)"
        else:
            who = "no listener visible here (another network namespace, or a socket bound without listening)"
        errors = {e for (_, p), e in busy.items() if p == port}
        verb = "is in use" if errors == {"EADDRINUSE"} else "cannot be bound"
        parts.append(f"port {port} {verb} on {where}: {who}; fix: {procinfo.fix_text(procs)}")
    if "EADDRNOTAVAIL" in busy.values():
        hint = "server.host must be an address of this machine (or 0.0.0.0 / ::)"
    else:
        hint = f"{procinfo.fix_text(holders)}; or choose other ports in the manifest"
    return timer.check(NAME, False, "; ".join(parts), hint, evidence)
