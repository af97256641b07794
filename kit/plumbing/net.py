"""Ports and local HTTP: can a port be bound, who listens where, and one no-proxy GET to a local server."""

from __future__ import annotations

import http.client
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable

import psutil

from kit.plumbing.tls import refused, refused_certificate

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


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


def opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    """A urllib opener that never goes through a proxy; https verified by ``context`` (None: http only)."""
    if context is None:
        return _NO_PROXY
    return urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))


def http_get(url: str, timeout: float = 5.0, context: ssl.SSLContext | None = None) -> tuple[int, bytes] | None:
    """(status, body) of a GET to a local server, never through a proxy; None when it cannot be asked. An https
    server whose certificate ``context`` refuses is a ServerError (exit 7) at once: no retry would change it."""
    try:
        with opener(context).open(url, timeout=timeout) as r:
            return int(r.status), r.read()
    except urllib.error.HTTPError as e:
        return int(e.code), b""
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as e:
        why = refused_certificate(e)
        if why is not None:
            raise refused(url, why) from None
        return None


def http_ok(url: str, timeout: float = 2.0, context: ssl.SSLContext | None = None) -> bool:
    """True when ``url`` answers 2xx."""
    got = http_get(url, timeout, context)
    return got is not None and 200 <= got[0] < 300
