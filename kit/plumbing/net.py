"""Ports and local HTTP: can a port be bound, who listens where, and one no-proxy GET to a local server."""

from __future__ import annotations

import contextlib
import http.client
import socket
import ssl
import threading
import urllib.parse
from collections.abc import Iterable

import psutil

from kit.plumbing.tls import refused, refused_certificate


def port_bindable(host: str, port: int) -> bool:
    """True when a listening socket could bind ``host:port`` now (SO_REUSEADDR, like a server)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the kernel says is free now (for tests and throw-away servers)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def listening(pids: Iterable[int]) -> list[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN that one of ``pids`` holds (psutil: the process's socket
    inodes from /proc/PID/fd, matched in /proc/net/tcp and tcp6); processes gone or not ours to read are skipped."""
    found: set[tuple[str, int]] = set()
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="tcp")
        except (psutil.Error, OSError):
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN and c.laddr}
    return sorted(found)


def reaches(listen_address: str, host: str) -> bool:
    """Whether a socket listening on ``listen_address`` accepts connections kit makes to ``host`` (a wildcard
    address accepts them all)."""
    return listen_address in ("0.0.0.0", "::", host, f"::ffff:{host}")


def local_url(address: str, port: int, path: str = "/", scheme: str = "http") -> str:
    """The URL that reaches a local listener on ``address``:``port`` (a wildcard through loopback)."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(address, address)
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}{path}"


MAX_HEAD_LINES = 100  # http.client's own limit on header lines (each at most 64 KiB)


class _Deadline:
    """Shuts the connection's socket down at ``deadline`` (time.monotonic): whatever read is blocked then returns,
    so a server that drips its head or body byte by byte cannot hold kit past the request's time."""

    def __init__(self, conn: http.client.HTTPConnection, seconds: float) -> None:
        self._conn = conn
        self._timer = threading.Timer(seconds, self._cut)
        self._timer.daemon = True
        self.fired = False

    def _cut(self) -> None:
        self.fired = True
        sock = self._conn.sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self._conn.close()


def request(url: str, *, timeout: float, max_bytes: int, context: ssl.SSLContext | None = None, method: str = "GET",
            body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """(status, body) of one request to a local server, never through a proxy and never following a redirect, bounded
    in time (``timeout`` for the whole exchange, connect to last byte) and in bytes (the head by http.client's
    limits, the body read to at most ``max_bytes`` + 1, so a caller sees that it was larger). Raises OSError (a
    TimeoutError at the deadline) or http.client.HTTPException when it cannot be asked or answered; an https server
    whose certificate ``context`` refuses is a ServerError (exit 7) at once: no retry would change it."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    conn: http.client.HTTPConnection
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    with _Deadline(conn, timeout) as deadline:
        try:
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read(max_bytes + 1)
        except (OSError, http.client.HTTPException, ValueError) as e:
            why = refused_certificate(e)
            if why is not None:
                raise refused(url, why) from None
            if deadline.fired:
                raise TimeoutError(f"no complete answer within {timeout:g} s") from None
            raise
        if deadline.fired:
            raise TimeoutError(f"no complete answer within {timeout:g} s")
        return int(r.status), data


def http_get(url: str, timeout: float = 5.0, context: ssl.SSLContext | None = None,
             max_bytes: int = 64 * 1024) -> tuple[int, bytes] | None:
    """(status, body) of a GET to a local server (``request``: bounded in time and bytes); None when it cannot be
    asked or does not answer in time."""
    try:
        return request(url, timeout=timeout, max_bytes=max_bytes, context=context)
    except (OSError, ValueError, http.client.HTTPException):
        return None


def http_ok(url: str, timeout: float = 2.0, context: ssl.SSLContext | None = None) -> bool:
    """True when ``url`` answers 2xx."""
    got = http_get(url, timeout, context)
    return got is not None and 200 <= got[0] < 300
