"""Driver-process side (imported only inside ``python -m kit.load.driver``): one request's state while its body
streams (``Request``) and the one greenlet that reads every stream of the process (``Demux``)."""

from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching, see kit.load.driver)

# isort: split
import errno
import logging
import os
import sys
from collections.abc import Callable
from typing import Any

import gevent
from gevent._hub_primitives import wait_on_watcher
from gevent.event import Event
from gevent.monkey import get_original
from geventhttpclient.response import HTTPSocketPoolResponse

log = logging.getLogger("kit.load.driver")
_native_epoll = get_original("select", "epoll")  # gevent's monkey-patching hides the blocking epoll
_EPOLLIN = 1


class Request:
    """One request: its outcome, and while its body streams, the state the demultiplexer needs."""

    __slots__ = ("buf", "chunk_ns", "done", "e2e_ns", "error", "events", "exc", "fd", "finish_seen", "finished",
                 "first_lag_ns", "head_rx_ns", "max_tokens", "raw_recv", "raw_recvmsg", "resp", "status", "t0",
                 "usage_completion", "usage_prompt")

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens  # what this request asked for: its events' cap and its usage count's bound
        self.done = False         # `data: [DONE]` came
        self.finish_seen = False  # an event carried a non-null finish_reason
        self.status = 0
        self.error: str | None = None
        self.chunk_ns: list[int] = []
        self.events = 0           # `data:` events seen (content or not), against the driver's cap
        self.usage_completion: object = None  # as the server sent them: checked when the request ends
        self.usage_prompt: object = None
        self.e2e_ns = 0
        self.t0 = 0
        self.fd = -1
        self.resp: HTTPSocketPoolResponse | None = None
        self.buf = bytearray()
        self.raw_recv: Callable[[int], bytes] | None = None
        self.raw_recvmsg: Callable[[int, int], tuple[bytes, list[tuple[int, int, bytes]], int, Any]] | None = None
        self.head_rx_ns = 0      # kernel receive time (CLOCK_REALTIME) of the response's first bytes
        self.first_lag_ns = -1   # first content chunk: read by the process - queued by the kernel
        self.finished: Event | None = None
        self.exc: BaseException | None = None


class Demux:
    """Reads every streaming body of the process from one greenlet.

    The body sockets of all streams in flight sit in one (non-gevent) ``epoll`` set, whose file descriptor
    is watched by a single gevent watcher. When it fires, the reader takes all ready sockets from one
    ``epoll.poll`` and, for each, does one ``recv``, takes ``perf_counter_ns()`` at once, feeds the bytes to
    geventhttpclient's C parser and scans the SSE events. Compared with one greenlet waiting per socket,
    this saves a greenlet switch, a watcher start/stop and gevent's failed first ``recv`` per token (about
    a quarter of the CPU per token). Users still send their requests and read headers themselves, and
    wait on an ``Event`` for their body to end.
    """

    MAX_EVENTS = 256

    def __init__(self, on_readable: Callable[[Request], None]) -> None:
        self.epoll = _native_epoll()
        self.streams: dict[int, Request] = {}
        self.on_readable = on_readable
        self.greenlet = gevent.spawn(self._run)
        self.greenlet.link_exception(_die)

    def add(self, fd: int, req: Request) -> None:
        self.streams[fd] = req
        self.epoll.register(fd, _EPOLLIN)

    def remove(self, fd: int) -> None:
        if self.streams.pop(fd, None) is not None:
            try:
                self.epoll.unregister(fd)
            except OSError as exc:
                # closed already: a body that ended on a `Connection: close` answer has its socket closed by the
                # parser as the message completes (legal HTTP/1.1), and closing it took it out of the set
                if exc.errno != errno.EBADF:
                    raise

    def close(self) -> None:
        """Stop the reader and close the epoll set (the end of a level; the process may run another)."""
        self.greenlet.unlink_all()
        self.greenlet.kill()
        self.epoll.close()

    def _run(self) -> None:
        watcher = gevent.get_hub().loop.io(self.epoll.fileno(), 1)
        poll, streams, on_readable = self.epoll.poll, self.streams, self.on_readable
        try:
            while True:
                wait_on_watcher(watcher)
                for fd, _ in poll(0, self.MAX_EVENTS):
                    req = streams.get(fd)
                    if req is not None:
                        on_readable(req)
        finally:
            watcher.close()


def _die(greenlet: gevent.Greenlet) -> None:
    log.critical("the stream reader died: %r", greenlet.exception)
    sys.stderr.flush()
    os._exit(4)
