"""The port gate against real sockets opened by the test."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from gate_helpers import make_manifest
from support.ports import free_port

from kit.gates import ports
from kit.gates.ports import bind_addresses, check_ports, listening_sockets, try_bind


def listen(address: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((address, port))
    s.listen()
    return s


@pytest.fixture
def port() -> Iterator[int]:
    yield free_port()


def test_free_port_passes(port: int) -> None:
    check = check_ports(make_manifest(port=port))
    assert check.ok, check.message
    assert check.message == f"port {port} free on 127.0.0.1"
    assert check.evidence["polls"] == 1


@pytest.mark.parametrize(("listen_on", "host"), [
    ("127.0.0.1", "127.0.0.1"),
    ("127.0.0.1", "0.0.0.0"),  # a loopback listener blocks a wildcard bind
    ("0.0.0.0", "127.0.0.1"),
    ("0.0.0.0", "0.0.0.0"),
])
def test_listener_fails_the_gate_and_names_this_pid(port: int, listen_on: str, host: str) -> None:
    with listen(listen_on, port):
        check = check_ports(make_manifest(port=port, host=host))
    assert not check.ok
    assert f"port {port} is in use on {host} (EADDRINUSE)" in check.message
    assert f"PID {os.getpid()} " in check.message
    assert f"listening on {listen_on}:{port}" in check.message
    owners = check.evidence["owners"][str(port)]
    assert any(p["pid"] == os.getpid() for s in owners for p in s["processes"])
    assert check.hint and check.hint.startswith("kill -TERM") and "kit clean" not in check.hint  # not kit's server


def test_extra_and_gate_ports_are_checked(port: int) -> None:
    extra, gate = free_port(), free_port()
    with listen("127.0.0.1", gate):
        check = check_ports(make_manifest(port=port, extra_ports=[extra], gate_ports=[gate]))
    assert not check.ok
    assert f"port {gate} is in use" in check.message and f"port {port} " not in check.message
    assert check.evidence["ports"] == [port, extra, gate]


def test_wildcard_host_also_tests_ipv6_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ports, "has_ipv6", lambda: True)
    assert bind_addresses("0.0.0.0") == ["0.0.0.0", "::"]
    assert bind_addresses("::") == ["::", "0.0.0.0"]
    assert bind_addresses("127.0.0.1") == ["127.0.0.1"]
    monkeypatch.setattr(ports, "has_ipv6", lambda: False)
    assert bind_addresses("0.0.0.0") == ["0.0.0.0"]


@pytest.mark.skipif(not ports.has_ipv6(), reason="no IPv6 on this host")
def test_ipv6_listener_blocks_a_wildcard_server(port: int) -> None:
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # not visible to an IPv4 bind test
    s.bind(("::", port))
    s.listen()
    with s:
        check = check_ports(make_manifest(port=port, host="0.0.0.0"))
    assert not check.ok
    assert f"port {port} is in use on :: (EADDRINUSE)" in check.message
    assert f"PID {os.getpid()} " in check.message


def test_time_wait_does_not_count_as_busy(port: int) -> None:
    """SO_REUSEADDR: a closed connection's TIME_WAIT socket on the port must not fail the gate."""
    with listen("127.0.0.1", port) as server:
        client = socket.create_connection(("127.0.0.1", port))
        conn, _ = server.accept()
        conn.close()  # the server side closes first: its socket goes to TIME_WAIT
        client.close()
    assert try_bind("127.0.0.1", port) is None
    assert check_ports(make_manifest(port=port)).ok


def test_port_freed_while_polling_passes(port: int) -> None:
    s = listen("127.0.0.1", port)
    threading.Timer(0.2, s.close).start()
    t0 = time.monotonic()
    check = check_ports(make_manifest(port=port, port_deadline_s=5))
    assert check.ok, check.message
    assert 0.15 < time.monotonic() - t0 < 1.0
    assert check.evidence["polls"] > 3


def test_port_deadline_is_respected(port: int) -> None:
    with listen("127.0.0.1", port):
        t0 = time.monotonic()
        check = check_ports(make_manifest(port=port, port_deadline_s=0.3))
        elapsed = time.monotonic() - t0
    assert not check.ok
    assert 0.3 <= elapsed < 0.3 + 5.0  # waited the deadline out, then stopped (liveness, not a timing claim)


def test_proc_net_tcp_finds_the_listener(port: int) -> None:
    with listen("127.0.0.1", port):
        found = listening_sockets(port)
    assert [s["address"] for s in found] == ["127.0.0.1"]
    assert found[0]["inode"] > 0
