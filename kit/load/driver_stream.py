"""Driver-process side (imported only inside ``python -m kit.load.driver``): sending one request and
reading its SSE stream, every stream of the process read by one demultiplexing greenlet.

A stream is read straight from the socket: one ``recv`` per wake-up, one ``time.perf_counter_ns()`` right
after it, before any parsing; every SSE event that came in that read is stamped with it (several events in
one read really did arrive together, which is what the near-zero-gap share in the stats watches). Content
chunks are recognised on bytes (``kit.load.sse``); only the usage chunk is parsed as JSON. This is the
line-by-line reading that Locust's ``iter_lines()`` does not do: that one waits for 1 KiB.

The client's own share of each TTFT is measured too: every socket asks the kernel for receive timestamps
(``SO_TIMESTAMPNS``), and the reads up to the first content chunk use ``recvmsg`` (the response head is
peeked), so ``first_read_lag`` = when the process read the first chunk's bytes minus when the kernel
queued them on the socket (CLOCK_REALTIME on both sides). That is the delay a busy event loop adds to a
TTFT, per request, including when a whole wave of first chunks arrives at once; a lower bound when later tokens
queued behind the first unread (the kernel merges them under the newest stamp, ``kit.load.driver_sock``).

Everything a server sends is bounded (``kit.files.bounds``): the response head, an error body (only its
start is read), an SSE line and the number of events per request (a multiple of the tokens asked); a request
that goes beyond one ends with an error saying which, and the other requests go on. The server's usage count is
checked as the request ends (``kit.files.bounds``) and flagged in its record when it cannot be true.
"""

from __future__ import annotations

import locust  # noqa: F401  (first: gevent monkey-patching, see kit.load.driver)

# isort: split
import os
import socket
import time
from typing import Any

import gevent
from gevent.event import Event
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPSocketPoolResponse
from geventhttpclient.url import URL

from kit.files import bounds
from kit.load import sse
from kit.load._config import DriverConfig
from kit.load.driver_demux import Demux, Request
from kit.load.driver_phase import Budget, Phase
from kit.load.driver_sock import (
    SO_TIMESTAMPNS,
    StreamCut,
    StreamResponse,
    describe,
    error_body,
    peek_rx,
    recv_stamped,
    short,
)
from kit.load.driver_tls import drain_pending, tls_pool, tls_recv
from kit.load.prompts import ENDPOINT_PATHS, BodyBuilder, PromptSource, WorkloadBodies, prompt_problem
from kit.plumbing.redact import redact

RECV_SIZE = 65536
SPIN_NS = 1_500_000  # open loop: the last stretch before a due time is waited for by yielding, not by a timer
perf_ns = time.perf_counter_ns

_feed = HTTPResponseParser.feed  # geventhttpclient's C parser, without its Python wrapper


class Streamer:
    """Sends one request and reads its SSE stream; shared by all users of the process.

    Requests go out through geventhttpclient's ``ConnectionPool`` (one keep-alive connection per user)
    with a request head built from a template, and come back through its ``HTTPSocketPoolResponse``
    (the C HTTP parser); ``HTTPClient.request`` is skipped because its generic header handling costs
    more than the rest of a request's setup together.
    """

    def __init__(self, cfg: DriverConfig) -> None:
        self.cfg = cfg
        self.url = URL(cfg.base_url.rstrip("/") + ENDPOINT_PATHS[cfg.endpoint])
        self.key = sse.content_key(cfg.endpoint)
        self.workload: WorkloadBodies | None = None
        self.bodies: BodyBuilder | WorkloadBodies
        if cfg.workload_path:
            self.bodies = self.workload = WorkloadBodies(cfg.workload_path, cfg.endpoint, cfg.model, cfg.dialect,
                                                         cfg.body_fields, cfg.seed_per_request)
        else:
            self.bodies = BodyBuilder(cfg.endpoint, cfg.model, cfg.output_tokens,
                                      PromptSource(cfg.seed, cfg.prompt_tokens), cfg.dialect, cfg.body_fields)
        self.tls = self.url.scheme == "https"
        default_port = 443 if self.tls else 80
        host = self.url.host if self.url.port in (None, default_port) else f"{self.url.host}:{self.url.port}"
        self.head = (f"POST {self.url.request_uri} HTTP/1.1\r\nHost: {host}\r\n"
                     "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                     "Accept-Encoding: identity\r\nUser-Agent: kit-load\r\n"
                     f"{extra_headers(cfg)}"
                     "X-Request-Id: %s\r\nContent-Length: %d\r\n\r\n").encode("latin-1")
        self.budget = Budget()
        self.phase = Phase("setup", "", 0, None, {})
        self.pools: list[ConnectionPool] = []
        self.demux = Demux(self._on_readable)
        # transformers serve ends a stream at its finish_reason event; others send [DONE] (a body cut before: failed)
        self.finish_ends = cfg.dialect == "transformers"

    def new_pool(self) -> ConnectionPool:
        host, port = self.url.host, self.url.port or (443 if self.tls else 80)
        if self.tls:
            return tls_pool(host, port, self.cfg)
        # network_timeout=None: no timer per socket wait; run_one's gevent.Timeout bounds the request
        return ConnectionPool(host, port, host, port, size=1, network_timeout=None,  # type: ignore[arg-type]
                              connection_timeout=min(self.cfg.request_timeout_s, 30.0))

    def close(self) -> None:
        """Stop the stream reader and close the kept-alive connections (the end of a level)."""
        self.demux.close()
        for pool in self.pools:
            pool.close()
        self.pools.clear()

    def dispatch(self, pool: ConnectionPool, ticket: int, user_index: int | None,
                 freed: int | None = None) -> int | None:
        """Send ticket's request when it is due: at once (closed loop; a user's first request of the level after
        its stagger, ``user_index`` set), or at its scheduled time (open loop), whatever the others are doing.
        ``freed``: when the user slot this ticket took became free (the ``release`` before it; None: the user's
        first ticket, free from the level's start). Returns when the request sent ended (None: none was sent), the
        moment its user became free: what the client does after that is its own lateness, not the cap's queue."""
        ph = self.phase
        taken = perf_ns()
        if ph.schedule is None:
            if user_index is not None and ph.stagger_ns:
                gevent.sleep(user_index * ph.stagger_ns / 1e9)
                taken = perf_ns()
            return self.run_one(pool, ticket, taken, None, None, user_index is not None)
        ph.go.wait()  # the level's clock starts at the common start once every user exists
        sched = ph.schedule[ticket]
        due = ph.t0 + sched
        free_at = ph.t0 if freed is None else max(freed, ph.t0)
        queue = 0
        if free_at > due:  # every user was busy when it fell due (the cap): it waited for the release that freed one
            queue, due = free_at - due, free_at
        # whatever lies between that moment and the send (a late wake-up, a busy event loop) is lateness
        now = perf_ns()
        if now < due:
            # the loop's timers wake about a millisecond late (epoll's resolution): sleep to just before the due
            # time, then yield until it (other greenlets run meanwhile), so sends keep sub-ms gaps at high rates
            if due - now > SPIN_NS:
                gevent.sleep((due - now - SPIN_NS) / 1e9)
            while perf_ns() < due:
                gevent.sleep(0)
        if ph.deadline is not None and due > ph.deadline:
            ph.unsent += 1
            return None
        return self.run_one(pool, ticket, due, sched, queue, False)

    def run_one(self, pool: ConnectionPool, ticket: int, due: int | None = None, sched: int | None = None,
                queue: int | None = None, first: bool = False) -> int:
        """Send one request and record it; returns when it ended (perf ns)."""
        ph = self.phase
        rid = f"{ph.rid_prefix}{ticket}"
        index = ph.indices[ticket] if ph.indices is not None else ph.index_offset + ticket
        body = self.bodies.body(index)
        payload = self.head % (rid.encode(), len(body)) + body
        req = Request(self.workload.max_tokens[index] if self.workload else self.cfg.output_tokens)
        timer = gevent.Timeout(self.cfg.request_timeout_s)
        timer.start()
        resp: HTTPSocketPoolResponse | None = None
        wall, t0 = time.time(), perf_ns()
        try:
            sock = pool.get_socket()  # connects if needed; its liveness check yields to other greenlets
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)  # per request: the socket may be new
            wall, t0 = time.time(), perf_ns()  # so the clock starts here, as the bytes go out
            self._sent(t0, due, queue, first)
            resp = self._send(pool, sock, payload, req, self.tls)
            req.status = resp.status_code
            if req.status == 200:
                self._read_stream(resp, t0, req)
            else:
                limit = bounds.MAX_ERROR_BODY
                req.error = f"http {req.status}: {short(error_body(resp, limit), limit)}"
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            req.error = f"timeout after {self.cfg.request_timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - every failure of one request is data, not a crash
            req.error = describe(exc, req.status)
        finally:
            req.e2e_ns = perf_ns() - t0
            timer.close()
            if resp is not None:
                resp.release()  # back to the pool when complete, closed otherwise
        self._account(rid, wall, t0, req, sched, None if due is None else max(0, t0 - due), queue, index)
        return t0 + req.e2e_ns

    def _sent(self, t0: int, due: int | None, queue: int | None, first: bool) -> None:
        ph = self.phase
        if due is not None:
            ph.late_ns.append(max(0, t0 - due))
        if queue is not None:
            ph.queue_ns.append(queue)
        if ph.first_send_ns is None:
            ph.first_send_ns = t0
        ph.last_send_ns = t0
        if first:
            ph.users_started += 1
            if ph.users_started == self.cfg.users:
                ph.ramp_end_ns = t0

    @staticmethod
    def _send(pool: ConnectionPool, sock: Any, payload: bytes, req: Request, tls: bool) -> HTTPSocketPoolResponse:
        try:
            sock.sendall(payload)
            # the kernel's receive time of the head; over TLS the first bytes may be a session ticket: not known
            req.head_rx_ns = 0 if tls else peek_rx(sock)
        except BaseException:
            pool.release_socket(sock)
            raise
        # reads the status line and headers; on failure it releases the socket itself
        return StreamResponse(sock, pool, block_size=RECV_SIZE, method="POST")

    def _read_stream(self, resp: HTTPSocketPoolResponse, t0: int, req: Request) -> None:
        """Hand the body to the demultiplexer and wait for its end (or for the request's timeout)."""
        req.resp, req.t0, req.buf = resp, t0, resp._body_buffer
        now = perf_ns()
        self._scan(req, now)  # bytes that came with the headers arrived with them
        if req.chunk_ns and req.head_rx_ns:
            req.first_lag_ns = max(0, now + self.phase.clock_offset_ns - req.head_rx_ns)
        gsock = resp._sock
        if self.tls and gsock is not None and not resp.message_complete:
            for data in drain_pending(gsock):  # what TLS decrypted with the head: no readiness will announce it
                _feed(resp, data)
                self._scan(req, perf_ns())
            gsock = resp._sock
        if gsock is not None and not resp.message_complete:
            req.fd = fd = gsock.fileno()
            if self.tls:  # decrypted reads; no kernel timestamps (they would stamp TLS records, not content)
                req.raw_recv, req.raw_recvmsg = tls_recv(gsock), None
            else:
                req.raw_recv = gsock._sock.recv  # the raw non-blocking socket under gevent's
                req.raw_recvmsg = gsock._sock.recvmsg
            req.finished = Event()
            self.demux.add(fd, req)
            try:
                req.finished.wait()
            finally:
                self.demux.remove(fd)  # before the socket can be closed or reused
            if req.exc is not None:
                raise req.exc
        elif not resp.message_complete:
            raise ConnectionError("connection closed mid-stream")
        if req.error is None:
            # The stream ends with `data: [DONE]` (OpenAI, sglang, vLLM), or, in the transformers dialect only, at
            # the end of the body after an event with a finish_reason; a body cut off before that is a failure.
            if not self._ended(req):
                req.error = "stream ended without [DONE]" + (" or a finish_reason" if self.finish_ends else "")
            elif not req.chunk_ns:
                req.error = "no content chunk"

    def _ended(self, req: Request) -> bool:
        return req.done or (self.finish_ends and req.finish_seen)

    def _on_readable(self, req: Request) -> None:
        """Called by the demultiplexer for a ready socket: one read, one timestamp, then parse."""
        try:
            assert req.raw_recv is not None and req.resp is not None
            if req.chunk_ns or req.raw_recvmsg is None:
                data = req.raw_recv(RECV_SIZE)
                now = perf_ns()
                rx = 0
            else:  # before the first content chunk: with the kernel's receive timestamp
                assert req.raw_recvmsg is not None
                data, rx, now = recv_stamped(req.raw_recvmsg, RECV_SIZE)
            if data:
                _feed(req.resp, data)  # may complete the message (and hand the socket back to its pool)
                self._scan(req, now)
                if rx and req.chunk_ns and req.first_lag_ns < 0:
                    req.first_lag_ns = max(0, now + self.phase.clock_offset_ns - rx)
                if not req.resp.message_complete:
                    return
            elif self._ended(req):  # a close-delimited body ends like this, after its last event
                req.resp.message_complete = True
            else:
                raise ConnectionError("connection closed mid-stream")
        except BlockingIOError:  # a spurious wake-up
            return
        except Exception as exc:  # noqa: BLE001 - the stream fails, the reader goes on
            req.exc = exc
        self.demux.remove(req.fd)
        assert req.finished is not None
        req.finished.set()

    def _scan(self, req: Request, now: int) -> None:
        """Stamp every content chunk complete in the buffer with ``now``; handle the rare other events."""
        buf = req.buf
        if 13 in buf:  # SSE ends a line with LF, CRLF or CR alone (13 is \r): each CR read as LF, before the scan
            buf[:] = buf.replace(b"\r", b"\n")  # CRLF becomes a skipped blank line; JSON holds no raw CR
        find = buf.find
        key = self.key
        klen = len(key)
        t = now - req.t0
        pos = 0
        events, cap = req.events, bounds.max_events(req.max_tokens)
        # jump from one `data:` field to the next; blank lines and other fields are skipped
        start = find(b"data:")
        while start >= 0:
            nl = find(b"\n", start)
            if nl < 0:
                break  # the rest of this line has not arrived yet
            if start == 0 or buf[start - 1] == 10:  # at a line start (10 is \n)
                events += 1
                if events > cap or req.done:  # nothing may follow [DONE]: a later token would be timed
                    raise StreamCut("an SSE event after [DONE]" if req.done
                                    else f"over {cap} SSE events for max_tokens {req.max_tokens}")
                # fast path for the usual token chunk: `...content":"<non-empty>...`; 34 is `"`
                i = find(key, start, nl)
                if i >= 0 and buf[i + klen] == 34 and buf[i + klen + 1] != 34:
                    req.chunk_ns.append(t)
                    if find(sse.FINISH, start, nl) >= 0:  # a last token may carry the finish_reason itself
                        req.finish_seen = True
                elif self._other_event(bytes(buf[start + 5:nl]), req):
                    req.chunk_ns.append(t)
            pos = nl + 1
            start = find(b"data:", pos)
        req.events = events
        if start < 0:  # no `data:` left: keep only a possibly incomplete last line
            pos = max(pos, buf.rfind(b"\n") + 1)
        if pos:
            del buf[:pos]
        if len(buf) > bounds.MAX_LINE:  # what is left is one line not ended yet: scanned again on every read
            raise StreamCut(f"SSE line over {bounds.MAX_LINE >> 10} KiB")

    def _other_event(self, payload: bytes, req: Request) -> bool:
        """The slow path: spacing variants, empty content, [DONE], finish_reason, usage, errors. True for content."""
        if sse.has_finish(payload):
            req.finish_seen = True
        if sse.has_content(payload, self.key):
            return True
        if len(payload) < 16 and payload.strip() == sse.DONE:
            req.done = True
        elif sse.has_usage(payload):
            req.usage_completion, req.usage_prompt = sse.parse_usage(payload)
        else:
            msg = sse.error_message(payload)
            if msg is not None and req.error is None:
                req.error = f"error event: {msg}"
        return False

    def _account(self, rid: str, wall: float, t0: int, req: Request, sched: int | None, late: int | None,
                 queue: int | None, index: int) -> None:
        ph = self.phase
        chunks = req.chunk_ns
        n = len(chunks)
        if req.error is not None:  # masked where it was made; this is the one way out of the process for it
            req.error = redact(req.error)
        if req.status == 200 and req.error is None and n > 0:
            ph.ok += 1
            ph.e2e_sum_ns += req.e2e_ns
        else:
            ph.errors += 1
            if ph.first_error is None:
                ph.first_error = req.error or f"http {req.status}"
        usage = bounds.usage_count(req.usage_completion)
        flag = bounds.usage_problem(req.usage_completion, n, req.max_tokens)
        ph.out_tokens += n
        ph.usage_tokens += usage or 0
        if req.first_lag_ns >= 0 and req.error is None:
            ph.first_read_lag_ns.append(req.first_lag_ns)
        if ph.sink is not None:
            ph.sink.put({**ph.tags, "rid": rid, "worker": self.cfg.worker, "t_start_ns": t0,
                         "wall_start": wall, "ttft_ns": chunks[0] if n else None, "chunk_ns": chunks,
                         "e2e_ns": req.e2e_ns, "usage_completion_tokens": usage,
                         "usage_prompt_tokens": bounds.usage_count(req.usage_prompt), "client_tokens": n,
                         "status": req.status, "error": req.error, "usage_flag": flag, "sched_ns": sched,
                         "late_ns": late, "queue_ns": queue,
                         **(self._prompt_check(index, req) if self.workload else {})}, chunks)

    def _prompt_check(self, index: int, req: Request) -> dict[str, object]:
        assert self.workload is not None
        expected = self.workload.expected[index]
        return {"workload_index": index, "max_tokens": self.workload.max_tokens[index],
                "prompt_tokens_expected": expected,
                "prompt_flag": prompt_problem(bounds.usage_count(req.usage_prompt), expected)}


def extra_headers(cfg: DriverConfig) -> str:
    """load.request's header lines: plain values, then secret ones read here from the named variables (never
    written anywhere: they live in this process's request head only)."""
    lines = [f"{k}: {v}\r\n" for k, v in cfg.headers.items()]
    for name, env in cfg.header_env.items():
        value = os.environ.get(env)
        if value is None or any(c in value for c in "\r\n\0"):
            raise SystemExit(f"header {name}: the variable {env} is unset or holds a line break")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).replace("%", "%%")
