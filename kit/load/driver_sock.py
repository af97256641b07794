"""Driver-process side (imported only inside ``python -m kit.load.driver``): the socket end of a stream.

The response class and error descriptions of ``kit.load.driver_stream``, and the kernel's receive
timestamp of a socket's next bytes (``SO_TIMESTAMPNS``), for the client's own share of each TTFT.

``recv_stamped`` reads with ``recvmsg`` and returns the timestamp of what it read; ``peek_rx`` waits for a
response's first bytes and returns their timestamp without reading them (the HTTP parser reads them
next). The timestamps are CLOCK_REALTIME, taken when the kernel queued the bytes on the socket; minus
them, the process's own read time gives how long the bytes waited for the client (at least: segments that
queue behind each other unread are merged under the newest one's stamp, see ``recv_stamped``).

The response head is bounded (``kit.files.bounds.MAX_HEAD_BYTES``) and an error body is read only to its start
(``error_body``): what goes beyond ends the request with ``StreamCut``, whose message is the request's error.

``KIT_LOAD_TEST_FIRST_READ_DELAY_MS`` (tests only) blocks the whole process that long before each of these
reads: an artificially slow client, whose delay the timestamps must show.
"""

from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching, see kit.load.driver)

# isort: split
import os
import socket
import struct
import time
from collections.abc import Callable
from typing import Any

from gevent.monkey import get_original
from gevent.socket import wait_read
from geventhttpclient.response import HTTPConnectionClosed, HTTPResponse, HTTPSocketPoolResponse

from kit.files.bounds import MAX_HEAD_BYTES
from kit.plumbing.redact import redact

SO_TIMESTAMPNS = int(getattr(socket, "SO_TIMESTAMPNS", 35))  # Linux; SCM_TIMESTAMPNS has the same number
_CMSG_SPACE = socket.CMSG_SPACE(16)
_TIMESPEC = struct.Struct("qq")
_block = get_original("time", "sleep")
TEST_FIRST_READ_DELAY_S = float(os.environ.get("KIT_LOAD_TEST_FIRST_READ_DELAY_MS") or 0) / 1000
perf_ns = time.perf_counter_ns

RecvMsg = Callable[..., tuple[bytes, list[tuple[int, int, bytes]], int, Any]]


def rx_ns(ancdata: list[tuple[int, int, bytes]]) -> int:
    """The receive timestamp in ``recvmsg``'s ancillary data, in ns since the epoch (0 when absent)."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return int(sec * 1_000_000_000 + nsec)
    return 0


def recv_stamped(recvmsg: RecvMsg, size: int) -> tuple[bytes, int, int]:
    """One read: (bytes, the receive time of the first of them or 0, ``perf_counter_ns`` after the read).

    The kernel reports the timestamp of the last buffer a read copied, which is a later token when several
    waited: so one byte is peeked first (the oldest buffer), then the read takes everything. A buffer is not
    always one packet: TCP merges a segment that arrives in order behind one still queued into it and stamps
    the merged buffer with the newer time (``tcp_try_coalesce``), so when tokens pile up unread the stamp is
    that of the last of them, and the lag measured from it is a lower bound of the first chunk's.
    """
    if TEST_FIRST_READ_DELAY_S:
        _block(TEST_FIRST_READ_DELAY_S)
    try:
        _, anc, _, _ = recvmsg(1, _CMSG_SPACE, socket.MSG_PEEK)
    except BlockingIOError:
        anc = []
    data, _, _, _ = recvmsg(size)
    now = perf_ns()
    return data, rx_ns(anc), now


def peek_rx(sock: Any) -> int:
    """Wait until ``sock`` (a gevent socket) has bytes; return their receive time (0 if unknown)."""
    raw = sock._sock
    while True:
        try:
            if TEST_FIRST_READ_DELAY_S:
                _block(TEST_FIRST_READ_DELAY_S)
            _, anc, _, _ = raw.recvmsg(1, _CMSG_SPACE, socket.MSG_PEEK)
            return rx_ns(anc)
        except BlockingIOError:
            wait_read(sock.fileno())


class StreamCut(Exception):
    """What the server sent went beyond one of kit's bounds; the message is the request's error."""


class StreamResponse(HTTPSocketPoolResponse):
    """geventhttpclient's response whose body callback is the buffer's own ``extend``, with a bounded head.

    The C parser calls ``_on_body`` once per HTTP chunk, i.e. once per token; binding it to
    ``bytearray.extend`` saves a Python frame per token. The buffer is only ever changed in place.
    A socket that always has bytes never makes gevent switch, so no timer could end a head that does not end:
    past ``MAX_HEAD_BYTES`` before a final (non-1xx) head is complete, the request ends.
    """

    _head_bytes = 0

    def _read_headers(self, pre_buffered: bytes = b"") -> None:
        self._on_body = self._body_buffer.extend  # type: ignore[method-assign,assignment]
        super()._read_headers(pre_buffered)

    def feed(self, data: str | bytes) -> None:
        if not self.headers_complete or self.get_code() < 200:  # still reading the head (or interim ones)
            if self._head_bytes >= MAX_HEAD_BYTES:
                raise StreamCut(f"response head over {MAX_HEAD_BYTES >> 10} KiB")
            self._head_bytes += len(data)
        super().feed(data)

    def _on_message_complete(self) -> None:
        # geventhttpclient gives the socket back to the pool when any message completes, a 1xx head's too: after a
        # 101 Switching Protocols the socket went back (the parse then failed, "Pause on CONNECT/Upgrade", but the
        # message read as complete, so it stayed pooled) and the next request on it read nothing until its timeout
        # (a review: two healthy requests recorded as 8 s timeouts); after a 100 Continue it was pooled while the
        # final response was still being read. A 1xx message is not the response: nothing is released (an interim
        # one is marked complete, as the parser needs before the next head; a 101 is not, so its socket is closed).
        code = self.get_code()
        if code >= 200:
            super()._on_message_complete()
        elif code != 101:
            HTTPResponse._on_message_complete(self)


def error_body(resp: HTTPSocketPoolResponse, limit: int) -> bytes:
    """The first ``limit`` bytes (at most) of a response's body: read until the body ends, the server closes,
    or ``limit`` bytes are in; the rest is never read (the connection is closed, not reused)."""
    buf = resp._body_buffer
    while resp._sock is not None and not resp.message_complete and len(buf) < limit:
        data = resp._sock.recv(limit)
        if not data:
            break
        resp.feed(data)
    return bytes(buf[:limit])


def short(body: bytes, limit: int) -> str:
    """The start of an error body, secrets masked (kit.plumbing.redact) before it is cut: all of it when it ended
    within ``limit`` bytes, else as a text cut there."""
    text = redact(body.decode("utf-8", "replace"), cut_end=len(body) >= limit).strip().replace("\n", " ")
    return text[:160] or "(empty body)"


def describe(exc: BaseException, status: int) -> str:
    if isinstance(exc, StreamCut):
        return str(exc)
    where = "mid-stream" if status else "before response"
    if isinstance(exc, ConnectionRefusedError):
        return "connect: connection refused"
    if isinstance(exc, ConnectionError) and str(exc) == "connection closed mid-stream":
        return str(exc)
    if isinstance(exc, ConnectionResetError):
        return f"connection reset {where}"
    if isinstance(exc, HTTPConnectionClosed):
        return f"connection closed {where}"
    return redact(f"{type(exc).__name__} {where}: {exc}")[:200]


