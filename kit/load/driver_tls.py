"""Driver-process side (imported only inside ``python -m kit.load.driver``): https. A connection pool whose sockets
are wrapped in TLS (verified against the system's CA certificates or ``ca_bundle``, with the server's name checked,
unless ``verify_tls`` is off), and the non-blocking decrypted read the stream demultiplexer needs in place of the
raw socket's ``recv``: one readiness of the socket may hold several TLS records, and OpenSSL keeps what it decrypted
beyond one read (``pending``), which no readiness would announce again, so every read drains it.

Over TLS the client's first-read lag (kernel receive timestamps) is not measured: the kernel stamps TLS records,
and the first of them may be a session ticket rather than content.
"""

from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching, see kit.load.driver)

# isort: split
import ssl
from collections.abc import Callable, Iterator
from typing import Any

from geventhttpclient.connectionpool import SSLConnectionPool

from kit.load._config import DriverConfig
from kit.plumbing.tls import TlsClient


def tls_context(cfg: DriverConfig) -> ssl.SSLContext:
    """The context every other path of kit's verifies the server with (kit.plumbing.tls)."""
    return TlsClient(cfg.ca_bundle, cfg.verify_tls).context()


def tls_pool(host: str, port: int, cfg: DriverConfig) -> SSLConnectionPool:
    ctx = tls_context(cfg)
    return SSLConnectionPool(host, port, host, port, insecure=not cfg.verify_tls,
                             ssl_context_factory=lambda *a, **k: ctx, size=1, network_timeout=None,
                             connection_timeout=min(cfg.request_timeout_s, 30.0))


def drain_pending(gsock: Any) -> Iterator[bytes]:
    """What OpenSSL decrypted and holds now (nothing is read from the socket)."""
    sslobj = gsock._sslobj
    while sslobj is not None and sslobj.pending():
        yield sslobj.read(sslobj.pending())


def tls_recv(gsock: Any) -> Callable[[int], bytes]:
    """A non-blocking ``recv`` of decrypted bytes: BlockingIOError when no whole record is there yet, b"" at the
    end of the connection."""
    sslobj = gsock._sslobj

    def recv(size: int) -> bytes:
        try:
            data: bytes = sslobj.read(size)
        except ssl.SSLWantReadError:
            raise BlockingIOError from None
        except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
            return b""
        return data + b"".join(drain_pending(gsock)) if data else data

    return recv
