"""One load-generating process: ``python -m kit.load.driver CONFIG.json`` (started by ``kit.load.run_level``).

``import locust`` must come first in this process: it monkey-patches the standard library with gevent,
and crashes when ``requests``/``urllib3``/``docker`` were imported before it. Nothing else may import
this module.

What it does, in order:

1. raises ``RLIMIT_NOFILE``, builds the deterministic request bodies, creates a Locust ``LocalRunner``;
2. warm-up: ``runner.start(users, users)`` against a budget of ``warmup_requests`` tickets; nothing is
   recorded; prints ``{"event": "warm", ...}``;
3. with ``wait_for_go``, blocks until the parent writes a line on stdin (so several processes start their
   level together);
4. the level: the same users against ``requests`` tickets; each finished request is one JSON line in
   ``records_path``, written and flushed at once; ``{"event": "progress", ...}`` every
   ``progress_interval_s``;
5. prints ``{"event": "done", "stats": {...}}`` (the self-monitoring that ends up in ``client.json``) and
   exits 0.

Each user owns one keep-alive connection (a geventhttpclient ``ConnectionPool`` of size 1), kept from the
warm-up into the level. A stream is read straight from the socket: one ``recv`` per wake-up, one
``time.perf_counter_ns()`` right after it, before any parsing; every SSE event that came in that read is
stamped with it (several events in one read really did arrive together, which is what the near-zero-gap
share in the stats watches). Content chunks are recognised on bytes (``kit.load.sse``); only the usage
chunk is parsed as JSON. This is the line-by-line reading that Locust's ``iter_lines()`` does not do: that
one waits for 1 KiB.
"""

from __future__ import annotations

import locust  # noqa: F401  (the first import of the process: gevent monkey-patching)

# isort: split
import _queue
import bisect
import gc
import json
import logging
import operator
import os
import resource
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
from gevent._hub_primitives import wait_on_watcher
from gevent.event import Event
from gevent.monkey import get_original
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPSocketPoolResponse
from geventhttpclient.url import URL
from locust import User, constant, task
from locust.env import Environment
from locust.exception import StopUser

from kit.load import sse
from kit.load._config import DriverConfig
from kit.load.prompts import ENDPOINT_PATHS, BodyBuilder, PromptSource

NEAR_ZERO_GAP_NS = 100_000  # two chunks stamped < 0.1 ms apart were (almost surely) read together
RECV_SIZE = 65536
perf_ns = time.perf_counter_ns

log = logging.getLogger("kit.load.driver")
_native_thread = get_original("_thread", "start_new_thread")
_native_lock = get_original("_thread", "allocate_lock")
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_native_epoll = get_original("select", "epoll")  # gevent's monkey-patching hides the blocking epoll
_EPOLLIN = 1
_feed = HTTPResponseParser.feed  # geventhttpclient's C parser, without its Python wrapper


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def raise_nofile(want: int = 65536) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Budget:
    """Shared tickets of one phase; gevent runs in one thread, so no lock."""

    def __init__(self) -> None:
        self.left = 0
        self.next = 0
        self.inflight = 0
        self.finished = Event()

    def reset(self, n: int) -> None:
        self.left, self.next, self.inflight = n, 0, 0
        self.finished.clear()
        if n == 0:
            self.finished.set()

    def take(self) -> int | None:
        if self.left <= 0:
            return None
        self.left -= 1
        self.inflight += 1
        ticket = self.next
        self.next += 1
        return ticket

    def release(self) -> None:
        self.inflight -= 1
        if self.left <= 0 and self.inflight == 0:
            self.finished.set()


class Phase:
    """Counters of the current phase (warm-up or level) and where its records go."""

    def __init__(self, name: str, rid_prefix: str, index_offset: int, sink: RecordWriter | None,
                 tags: dict[str, Any]) -> None:
        self.name = name
        self.t0 = perf_ns()
        self.rid_prefix = rid_prefix
        self.index_offset = index_offset
        self.sink = sink
        self.tags = tags
        self.ok = 0
        self.errors = 0
        self.out_tokens = 0
        self.usage_tokens = 0
        self.first_error: str | None = None


class RecordWriter:
    """Serialises and appends records on a native thread, so a slow disk never stalls the event loop.

    Each record is written (unbuffered: one ``write``) as soon as the thread gets it. The thread also keeps
    every content-chunk offset, for the gap statistics at the end of the level. It touches no gevent
    object: a native queue, a native lock.
    """

    def __init__(self, path: str) -> None:
        self.file = open(path, "ab", buffering=0)  # noqa: SIM115 - closed by the thread
        self.queue: Any = _queue.SimpleQueue()
        self.offsets = array("q")   # chunk_ns of every record, concatenated
        self.lengths = array("q")   # number of chunks per record
        self.error: BaseException | None = None
        self._done = _native_lock()
        self._done.acquire()
        _native_thread(self._run, ())

    def put(self, rec: dict[str, Any]) -> None:
        self.queue.put(rec)

    def close(self) -> None:
        """Flush everything and stop the thread; blocks the process (only at the end of the level)."""
        self.queue.put(None)
        self._done.acquire()
        if self.error is not None:
            raise RuntimeError(f"writing records failed: {self.error!r}") from self.error

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - reported by close()
            self.error = exc
        finally:
            self.file.close()
            self._done.release()

    def _loop(self) -> None:
        q, dumps, write = self.queue, _ENCODER.encode, self.file.write
        while True:
            rec = q.get()
            if rec is None:
                return
            write((dumps(rec) + "\n").encode())  # unbuffered: one write per record
            self.offsets.extend(rec["chunk_ns"])
            self.lengths.append(len(rec["chunk_ns"]))
            if not q.empty():
                os.sched_yield()  # let the event loop in between records (it matters under SCHED_FIFO)


class Request:
    """One request: its outcome, and while its body streams, the state the demultiplexer needs."""

    __slots__ = ("buf", "chunk_ns", "done", "e2e_ns", "error", "exc", "fd", "finished", "raw_recv", "resp",
                 "status", "t0", "usage_completion", "usage_prompt")

    def __init__(self) -> None:
        self.done = False
        self.status = 0
        self.error: str | None = None
        self.chunk_ns: list[int] = []
        self.usage_completion: int | None = None
        self.usage_prompt: int | None = None
        self.e2e_ns = 0
        self.t0 = 0
        self.fd = -1
        self.resp: HTTPSocketPoolResponse | None = None
        self.buf = bytearray()
        self.raw_recv: Callable[[int], bytes] | None = None
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
            self.epoll.unregister(fd)

    def _run(self) -> None:
        watcher = gevent.get_hub().loop.io(self.epoll.fileno(), 1)
        poll, streams, on_readable = self.epoll.poll, self.streams, self.on_readable
        while True:
            wait_on_watcher(watcher)
            for fd, _ in poll(0, self.MAX_EVENTS):
                req = streams.get(fd)
                if req is not None:
                    on_readable(req)


def _die(greenlet: gevent.Greenlet) -> None:
    log.critical("the stream reader died: %r", greenlet.exception)
    sys.stderr.flush()
    os._exit(4)


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
        self.bodies = BodyBuilder(cfg.endpoint, cfg.model, cfg.output_tokens,
                                  PromptSource(cfg.seed, cfg.prompt_tokens))
        host = self.url.host if self.url.port in (None, 80) else f"{self.url.host}:{self.url.port}"
        self.head = (f"POST {self.url.request_uri} HTTP/1.1\r\nHost: {host}\r\n"
                     "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                     "Accept-Encoding: identity\r\nUser-Agent: kit-load\r\n"
                     "X-Request-Id: %s\r\nContent-Length: %d\r\n\r\n").encode("latin-1")
        self.budget = Budget()
        self.phase = Phase("setup", "", 0, None, {})
        self.pools: list[ConnectionPool] = []
        self.demux = Demux(self._on_readable)

    def new_pool(self) -> ConnectionPool:
        host, port = self.url.host, self.url.port or 80
        # network_timeout=None: no timer per socket wait; run_one's gevent.Timeout bounds the request
        return ConnectionPool(host, port, host, port, size=1, network_timeout=None,  # type: ignore[arg-type]
                              connection_timeout=min(self.cfg.request_timeout_s, 30.0))

    def run_one(self, pool: ConnectionPool, ticket: int) -> None:
        ph = self.phase
        rid = f"{ph.rid_prefix}{ticket}"
        body = self.bodies.body(ph.index_offset + ticket)
        payload = self.head % (rid.encode(), len(body)) + body
        req = Request()
        timer = gevent.Timeout(self.cfg.request_timeout_s)
        timer.start()
        resp: HTTPSocketPoolResponse | None = None
        wall, t0 = time.time(), perf_ns()
        try:
            sock = pool.get_socket()  # connects if needed; its liveness check yields to other greenlets
            wall, t0 = time.time(), perf_ns()  # so the clock starts here, as the bytes go out
            resp = self._send(pool, sock, payload)
            req.status = resp.status_code
            if req.status == 200:
                self._read_stream(resp, t0, req)
            else:
                req.error = f"http {req.status}: {_short(resp.read())}"
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            req.error = f"timeout after {self.cfg.request_timeout_s:g} s"
        except Exception as exc:  # noqa: BLE001 - every failure of one request is data, not a crash
            req.error = _describe(exc, req.status)
        finally:
            req.e2e_ns = perf_ns() - t0
            timer.close()
            if resp is not None:
                resp.release()  # back to the pool when complete, closed otherwise
        self._account(rid, wall, t0, req)

    @staticmethod
    def _send(pool: ConnectionPool, sock: Any, payload: bytes) -> HTTPSocketPoolResponse:
        try:
            sock.sendall(payload)
        except BaseException:
            pool.release_socket(sock)
            raise
        # reads the status line and headers; on failure it releases the socket itself
        return _StreamResponse(sock, pool, block_size=RECV_SIZE, method="POST")

    def _read_stream(self, resp: HTTPSocketPoolResponse, t0: int, req: Request) -> None:
        """Hand the body to the demultiplexer and wait for its end (or for the request's timeout)."""
        req.resp, req.t0, req.buf = resp, t0, resp._body_buffer
        self._scan(req, perf_ns())  # bytes that came with the headers arrived with them
        gsock = resp._sock
        if gsock is not None and not resp.message_complete:
            req.fd = fd = gsock.fileno()
            req.raw_recv = gsock._sock.recv  # the raw non-blocking socket under gevent's
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
            if not req.done:
                req.error = "stream ended without [DONE]"
            elif not req.chunk_ns:
                req.error = "no content chunk"

    def _on_readable(self, req: Request) -> None:
        """Called by the demultiplexer for a ready socket: one read, one timestamp, then parse."""
        try:
            assert req.raw_recv is not None and req.resp is not None
            data = req.raw_recv(RECV_SIZE)
            now = perf_ns()
            if data:
                _feed(req.resp, data)  # may complete the message (and hand the socket back to its pool)
                self._scan(req, now)
                if not req.resp.message_complete:
                    return
            elif req.done:  # a close-delimited body ends like this, after its [DONE]
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
        find = buf.find
        key = self.key
        klen = len(key)
        t = now - req.t0
        pos = 0
        # jump from one `data:` field to the next; blank lines and other fields are skipped
        start = find(b"data:")
        while start >= 0:
            nl = find(b"\n", start)
            if nl < 0:
                break  # the rest of this line has not arrived yet
            if start == 0 or buf[start - 1] == 10:  # at a line start (10 is \n)
                # fast path for the usual token chunk: `...content":"<non-empty>...`; 34 is `"`
                i = find(key, start, nl)
                if (i >= 0 and buf[i + klen] == 34 and buf[i + klen + 1] != 34) or \
                        self._other_event(bytes(buf[start + 5:nl]), req):
                    req.chunk_ns.append(t)
            pos = nl + 1
            start = find(b"data:", pos)
        if start < 0:  # no `data:` left: keep only a possibly incomplete last line
            pos = max(pos, buf.rfind(b"\n") + 1)
        if pos:
            del buf[:pos]

    def _other_event(self, payload: bytes, req: Request) -> bool:
        """The slow path: spacing variants, empty content, [DONE], usage, errors. True for content."""
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

    def _account(self, rid: str, wall: float, t0: int, req: Request) -> None:
        ph = self.phase
        chunks = req.chunk_ns
        n = len(chunks)
        if req.status == 200 and req.error is None and n > 0:
            ph.ok += 1
        else:
            ph.errors += 1
            if ph.first_error is None:
                ph.first_error = req.error or f"http {req.status}"
        ph.out_tokens += n
        ph.usage_tokens += req.usage_completion or 0
        if ph.sink is not None:
            ph.sink.put({**ph.tags, "rid": rid, "worker": self.cfg.worker, "t_start_ns": t0,
                         "wall_start": wall, "ttft_ns": chunks[0] if n else None, "chunk_ns": chunks,
                         "e2e_ns": req.e2e_ns, "usage_completion_tokens": req.usage_completion,
                         "usage_prompt_tokens": req.usage_prompt, "client_tokens": n,
                         "status": req.status, "error": req.error})


class _StreamResponse(HTTPSocketPoolResponse):
    """geventhttpclient's response whose body callback is the buffer's own ``extend``.

    The C parser calls ``_on_body`` once per HTTP chunk, i.e. once per token; binding it to
    ``bytearray.extend`` saves a Python frame per token. The buffer is only ever changed in place.
    """

    def _read_headers(self, pre_buffered: bytes = b"") -> None:
        self._on_body = self._body_buffer.extend  # type: ignore[method-assign,assignment]
        super()._read_headers(pre_buffered)


def _short(body: bytes) -> str:
    text = body[:300].decode("utf-8", "replace").strip().replace("\n", " ")
    return text[:160] or "(empty body)"


def _describe(exc: BaseException, status: int) -> str:
    where = "mid-stream" if status else "before response"
    if isinstance(exc, ConnectionRefusedError):
        return "connect: connection refused"
    if isinstance(exc, ConnectionError) and str(exc) == "connection closed mid-stream":
        return str(exc)
    if isinstance(exc, ConnectionResetError):
        return f"connection reset {where}"
    if isinstance(exc, HTTPConnectionClosed):
        return f"connection closed {where}"
    return f"{type(exc).__name__} {where}: {exc}"[:200]


def make_user_class(streamer: Streamer, base_url: str) -> type[User]:
    class StreamUser(User):
        host = base_url
        wait_time = constant(0)

        pool: ConnectionPool | None = None

        def on_start(self) -> None:
            # connections outlive the user: the level's users reuse the warm-up's connections
            self.pool = streamer.pools.pop() if streamer.pools else streamer.new_pool()

        def on_stop(self) -> None:
            if self.pool is not None:
                streamer.pools.append(self.pool)
                self.pool = None

        @task
        def one_request(self) -> None:
            ticket = streamer.budget.take()
            if ticket is None:
                raise StopUser()
            try:
                assert self.pool is not None
                streamer.run_one(self.pool, ticket)
            finally:
                streamer.budget.release()

    return StreamUser


class Monitor:
    """Self-monitoring during the level: scheduling lag and CPU per window."""

    def __init__(self, cfg: DriverConfig) -> None:
        self.cfg = cfg
        self.lag_ns = array("q")
        self.cpu_windows: list[float] = []
        self.greenlets: list[gevent.Greenlet] = []

    def start(self) -> None:
        for fn in (self._lag_probe, self._cpu_sampler):
            self.greenlets.append(gevent.spawn(fn))

    def stop(self) -> None:
        gevent.killall(self.greenlets)

    def _lag_probe(self) -> None:
        interval = self.cfg.lag_probe_interval_s
        want = int(interval * 1e9)
        while True:
            t = perf_ns()
            gevent.sleep(interval)
            now = perf_ns()
            self.lag_ns.append(max(0, now - t - want))

    def _cpu_sampler(self) -> None:
        interval = self.cfg.cpu_sample_interval_s
        c0, t0 = cpu_seconds(), time.perf_counter()
        while True:
            gevent.sleep(interval)
            c1, t1 = cpu_seconds(), time.perf_counter()
            self.cpu_windows.append((c1 - c0) / max(t1 - t0, 1e-9))
            c0, t0 = c1, t1


def heartbeat(cfg: DriverConfig, streamer: Streamer) -> None:
    """Progress of the current phase, every ``progress_interval_s``; the parent's watchdog needs it."""
    while True:
        gevent.sleep(cfg.progress_interval_s)
        ph = streamer.phase
        emit("progress", worker=cfg.worker, phase=ph.name, done=ph.ok + ph.errors, errors=ph.errors,
             out_tokens=ph.out_tokens, elapsed_s=round((perf_ns() - ph.t0) / 1e9, 3))


def _pct(sorted_vals: list[int], q: float) -> int:
    if not sorted_vals:
        return 0
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def lag_stats(lag_ns: array[int]) -> dict[str, Any]:
    vals = list(lag_ns)
    n = len(vals)
    out: dict[str, Any] = {"samples": n}
    s = sorted(vals)
    out.update(p50_ms=_pct(s, 0.5) / 1e6, p99_ms=_pct(s, 0.99) / 1e6, max_ms=(s[-1] / 1e6 if s else 0.0))
    third = n // 3
    if third >= 5:
        first, last = sorted(vals[:third]), sorted(vals[-third:])
        out["first_third"] = {"p50_ms": _pct(first, 0.5) / 1e6, "p99_ms": _pct(first, 0.99) / 1e6}
        out["last_third"] = {"p50_ms": _pct(last, 0.5) / 1e6, "p99_ms": _pct(last, 0.99) / 1e6}
    return out


def inter_chunk_gaps(offsets: array[int], lengths: array[int]) -> array[int]:
    """Gaps between consecutive chunks of the same request, from concatenated per-request offsets."""
    gaps = array("q")
    start = 0
    for n in lengths:
        if n > 1:
            seg = offsets[start:start + n]
            gaps.extend(map(operator.sub, seg[1:], seg[:-1]))
        start += n
    return gaps


def gap_stats(gaps: array[int]) -> dict[str, Any]:
    n = len(gaps)
    if n == 0:
        return {"gaps": 0, "median_ms": None, "p99_ms": None, "near_zero_share": None}
    s = sorted(gaps)
    near = bisect.bisect_left(s, NEAR_ZERO_GAP_NS)
    return {"gaps": n, "median_ms": _pct(s, 0.5) / 1e6, "p99_ms": _pct(s, 0.99) / 1e6,
            "near_zero_share": near / n, "near_zero_threshold_ms": NEAR_ZERO_GAP_NS / 1e6}


class Driver:
    def __init__(self, cfg: DriverConfig) -> None:
        self.cfg = cfg
        self.streamer = Streamer(cfg)
        user_class = make_user_class(self.streamer, cfg.base_url)
        self.env = Environment(user_classes=[user_class], host=cfg.base_url, stop_timeout=None)
        self.runner = self.env.create_local_runner()

    def run_phase(self, n: int) -> float:
        """Run ``n`` tickets with all users spawned at once; return the wall time in seconds."""
        budget = self.streamer.budget
        budget.reset(n)
        t0 = time.perf_counter()
        if n:
            self.runner.start(self.cfg.users, spawn_rate=self.cfg.users)
            budget.finished.wait()
            if self.runner.spawning_greenlet is not None:
                self.runner.spawning_greenlet.join()
            # every user ends itself (StopUser) once the tickets are gone; let the group drop them
            self.runner.user_greenlets.join(timeout=10)
            self.runner.stop()
        return time.perf_counter() - t0

    def warmup(self) -> dict[str, Any]:
        cfg = self.cfg
        ph = Phase("warmup", f"w{cfg.worker}-warm-", cfg.warmup_index_offset, None, {})
        self.streamer.phase = ph
        wall = self.run_phase(cfg.warmup_requests)
        return {"requests": cfg.warmup_requests, "ok": ph.ok, "errors": ph.errors, "wall_s": round(wall, 3),
                "first_error": ph.first_error}

    def level(self) -> dict[str, Any]:
        cfg = self.cfg
        sink = RecordWriter(cfg.records_path)
        ph = Phase("level", f"w{cfg.worker}-", cfg.index_offset, sink, dict(cfg.tags))
        self.streamer.phase = ph
        monitor = Monitor(cfg)
        gc.collect()
        gc.freeze()  # keep the long-lived objects out of the collector's way during the level
        start_wall, cpu0 = time.time(), cpu_seconds()
        ph.t0 = perf_ns()
        monitor.start()
        try:
            wall = self.run_phase(cfg.requests)
            cpu = cpu_seconds() - cpu0
            end_wall = time.time()
        finally:
            monitor.stop()
            sink.close()
        gaps = inter_chunk_gaps(sink.offsets, sink.lengths)
        return self._stats(ph, monitor, gaps, wall, cpu, start_wall, end_wall)

    def _stats(self, ph: Phase, mon: Monitor, gaps: array[int], wall: float, cpu: float, start_wall: float,
               end_wall: float) -> dict[str, Any]:
        windows = sorted(mon.cpu_windows)
        return {
            "worker": self.cfg.worker, "pid": os.getpid(), "users": self.cfg.users,
            "requests": self.cfg.requests, "ok": ph.ok, "errors": ph.errors, "first_error": ph.first_error,
            "out_tokens": ph.out_tokens, "usage_completion_tokens": ph.usage_tokens,
            "wall_s": round(wall, 4), "start_wall": start_wall, "end_wall": end_wall,
            "cpu_s": round(cpu, 4), "cpu_share": round(cpu / wall, 4) if wall > 0 else 0.0,
            "cpu_window_s": self.cfg.cpu_sample_interval_s,
            "cpu_window_share_max": round(windows[-1], 4) if windows else None,
            "cpu_window_share_p50": round(windows[len(windows) // 2], 4) if windows else None,
            "cpu_us_per_token": round(cpu / ph.out_tokens * 1e6, 2) if ph.out_tokens else None,
            "tokens_per_s": round(ph.out_tokens / wall, 1) if wall > 0 else 0.0,
            "lag": lag_stats(mon.lag_ns),
            "itl": gap_stats(gaps),
        }


def watch_parent(on_orphan: Callable[[], None]) -> None:
    parent = os.getppid()
    while True:
        gevent.sleep(0.5)
        if os.getppid() != parent:
            on_orphan()


def wait_for_go() -> None:
    line = sys.stdin.readline()  # blocks the whole process on purpose: nothing else runs now
    if not line:
        raise SystemExit("parent went away before the level started")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m kit.load.driver CONFIG.json", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("locust.runners").setLevel(logging.ERROR)  # "spawn rate > 100" is intended
    cfg = DriverConfig.read(Path(argv[0]))
    # the record writer thread takes the GIL in slices of at most 0.5 ms while the loop is busy
    sys.setswitchinterval(0.0005)
    nofile = raise_nofile()
    if nofile < cfg.users + 64:
        log.warning("RLIMIT_NOFILE is %d, below %d users + margin", nofile, cfg.users)
    driver = Driver(cfg)
    gevent.spawn(watch_parent, lambda: os._exit(3))
    beat = gevent.spawn(heartbeat, cfg, driver.streamer)
    warm = driver.warmup()
    emit("warm", worker=cfg.worker, **warm)
    if cfg.wait_for_go:
        wait_for_go()
    emit("start", worker=cfg.worker)
    stats = driver.level()
    stats["rlimit_nofile"] = nofile
    stats["warmup"] = warm
    beat.kill()
    driver.runner.quit()
    for pool in driver.streamer.pools:
        pool.close()
    emit("done", worker=cfg.worker, stats=stats)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
