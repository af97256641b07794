"""A hostile Prometheus ``/metrics`` endpoint for tests (stdlib only, a real socket server in a thread): every GET
gets the answer of its mode, as a broken or malicious server would send it.

Modes: ``slow-headers`` (a status line, then a header one byte every 20 ms without end), ``endless-body`` (valid
sample lines without end, no length), ``huge-valid`` (a valid exposition of 2 MiB with its length), ``garbage``
(not the text format), ``not-utf8``, ``status-500``, ``many-series`` (20,000 valid series of a kept family).
An endless answer stops when the client closes, or after 30 s.
"""

from __future__ import annotations

import socketserver
import threading
import time
from types import TracebackType

GIVE_UP_S = 30.0


def _body(mode: str) -> bytes:
    if mode == "huge-valid":
        line = b"kit_engine_requests_running 1\n"
        return line * ((2 << 20) // len(line) + 1)
    if mode == "garbage":
        return b'kit_engine_requests_running{oops="unterminated 1\n\x00\x01 }}}{{{\n'
    if mode == "not-utf8":
        return b"kit_engine_requests_running 1\n\xff\xfe\xfd 2\n"
    if mode == "many-series":
        return b"# TYPE kit_engine_x gauge\n" + b"".join(b'kit_engine_x{i="%d"} %d\n' % (i, i) for i in range(20_000))
    if mode == "costly":  # inside every bound, but each line its own family: CPU for prometheus_client's parser
        return b"".join(b"kit_engine_m%d %d\n" % (i, i) for i in range(45_000))
    if mode == "too-many-lines":
        return b"".join(b"kit_engine_m%d %d\n" % (i, i) for i in range(60_000))
    return b"kit_engine_requests_running 3\n"


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        f = self.request.makefile("rb")
        while f.readline(65536) not in (b"\r\n", b"\n", b""):
            pass
        mode, deadline = self.server.mode, time.monotonic() + GIVE_UP_S
        try:
            if mode == "slow-headers":
                self.request.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while time.monotonic() < deadline:
                    self.request.sendall(b"s")
                    time.sleep(0.02)
            elif mode == "endless-body":
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n")
                block = b"kit_engine_requests_running 1\n" * 2000
                while time.monotonic() < deadline:
                    self.request.sendall(block)
            elif mode == "status-500":
                self.request.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n"
                                     b"Connection: close\r\n\r\nboom")
            else:
                body = _body(mode)
                self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n"
                                     b"Connection: close\r\n\r\n" % len(body) + body)
        except OSError:  # the client closed: the end of an endless answer
            return


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    mode = ""


class HostileMetrics:
    """``with HostileMetrics(mode) as url:`` a live endpoint at ``url`` answering every GET in ``mode``."""

    def __init__(self, mode: str) -> None:
        self.server = _Server(("127.0.0.1", 0), _Handler)
        self.server.mode = mode
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/metrics"

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

