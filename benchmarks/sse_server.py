"""A fake OpenAI-style streaming server whose token timing is known (stdlib only).

It serves ``POST /v1/chat/completions`` and ``POST /v1/completions`` with ``stream: true`` the way
sglang does: an optional role-only first chunk with empty content, one SSE event per token (each in its own
HTTP chunk), a usage chunk when ``stream_options.include_usage`` is set, then ``data: [DONE]``.

Timing: the first token is sent ``--ttft-ms`` after the request body arrived, token *k* at
``arrival + ttft + k * itl`` (absolute deadlines, so lateness does not accumulate). One timer tick per
``--tick-us`` serves every stream that is due, instead of one timer per token.

Ground truth: with ``--log FILE`` the server appends one JSON line per finished request:
``{"rid", "status", "arrival_ns", "send_ns": [...], "tokens", "late_ns_max"}``, where ``rid`` is the
request's ``X-Request-Id`` header and the times are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC on Linux,
so they compare with a client's ``perf_counter_ns`` on the same host). ``send_ns`` holds the instant
just before each content chunk was written (no client can have read it earlier).

Fault modes for tests: ``--fail-every N`` answers every Nth completion request with HTTP 500,
``--stall-after K`` stops sending (but keeps the connection open) after K tokens, ``--max-tokens-cap C``
answers at most C tokens whatever a request asks for (a complete response, usage counting what was sent), as
an engine does whose context limit or an end-of-sequence it does not suppress ends a response early.

Used by ``benchmarks/loadgen.py`` and by the tests in ``tests/load/``. Prints ``LISTENING <port>`` on
stdout once it accepts connections.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import IO

_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}


@dataclass
class Config:
    ttft_ns: int
    itl_ns: int
    tick_ns: int
    empty_first_chunk: bool
    fail_every: int
    stall_after: int
    log: IO[str] | None
    max_tokens_cap: int = 0


@dataclass
class Stream:
    proto: HttpProtocol
    rid: str
    arrival_ns: int
    due_ns: int
    remaining: int
    token_chunk: bytes
    last_chunk: bytes
    tail: bytes
    send_ns: list[int] = field(default_factory=list)
    late_ns_max: int = 0
    done: bool = False


class Wheel:
    """Serves due streams once per tick; one asyncio timer for all of them."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.slots: dict[int, list[Stream]] = {}
        self.next_slot = 0
        self.handle: asyncio.TimerHandle | None = None
        self.ticking = False

    def add(self, s: Stream) -> None:
        slot = -(-s.due_ns // self.cfg.tick_ns)
        self.slots.setdefault(slot, []).append(s)
        if self.ticking:
            return  # _tick re-arms when it is done
        if self.handle is None or slot < self.next_slot:
            if self.handle is not None:
                self.handle.cancel()
            self.next_slot = slot
            self._arm()

    def _arm(self) -> None:
        loop = asyncio.get_running_loop()
        delay = max(0.0, (self.next_slot * self.cfg.tick_ns - time.perf_counter_ns()) / 1e9)
        self.handle = loop.call_later(delay, self._tick)

    def _tick(self) -> None:
        self.ticking = True
        now_slot = time.perf_counter_ns() // self.cfg.tick_ns
        slot = self.next_slot
        while slot <= now_slot:
            for s in self.slots.pop(slot, ()):
                self._serve(s)
            slot += 1
        self.ticking = False
        self.handle = None
        if self.slots:
            self.next_slot = max(slot, min(self.slots))
            self._arm()

    def _serve(self, s: Stream) -> None:
        if s.done:
            return
        proto = s.proto
        if proto.closed:
            s.done = True
            proto.server.log(s, 0)
            return
        now = time.perf_counter_ns()  # before the write: on loopback the client can read it before write returns
        s.send_ns.append(now)
        proto.transport.write(s.token_chunk if s.remaining > 1 else s.last_chunk)
        late = now - s.due_ns
        s.late_ns_max = max(s.late_ns_max, late)
        s.remaining -= 1
        if s.remaining == 0:
            proto.transport.write(s.tail)
            proto.finish(s, 200)
            return
        if self.cfg.stall_after and len(s.send_ns) >= self.cfg.stall_after:
            return  # never scheduled again: the client sees a silent connection
        s.due_ns += self.cfg.itl_ns
        self.add(s)


def _chunk(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _sse(obj: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chat_chunk(rid: str, model: str, content: str | None, role: str | None, finish: str | None) -> bytes:
    delta = {"role": role, "content": content, "reasoning_content": None, "tool_calls": None}
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
    return _sse({"id": rid, "object": "chat.completion.chunk", "created": 0, "model": model,
                 "choices": [choice], "usage": None})


def _text_chunk(rid: str, model: str, text: str, finish: str | None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": None}
    return _sse({"id": rid, "object": "text_completion", "created": 0, "model": model,
                 "choices": [choice], "usage": None})


def _usage_event(rid: str, model: str) -> bytes:
    usage = {"prompt_tokens": "@PT@", "completion_tokens": "@CT@"}
    return _sse({"id": rid, "object": "chat.completion.chunk", "created": 0, "model": model,
                 "choices": [], "usage": usage})


def _prompt_words(body: dict[str, object]) -> int:
    if "messages" in body:
        msgs = body["messages"]
        text = " ".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict)) \
            if isinstance(msgs, list) else ""
    else:
        text = str(body.get("prompt", ""))
    return len(text.split())


_HEAD_200 = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n")


def _fill(template: bytes, rid: bytes) -> bytes:
    """An SSE event template with the request id put in, framed as one HTTP chunk."""
    return _chunk(template.replace(b"@RID@", rid))


class Server:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.wheel = Wheel(cfg)
        self.count = 0
        self._templates: dict[tuple[bool, str], tuple[bytes, bytes, bytes, bytes]] = {}

    def templates(self, chat: bool, model: str) -> tuple[bytes, bytes, bytes, bytes]:
        """(first, token, last, usage) events, unframed, with @RID@ (and @PT@/@CT@) placeholders."""
        key = (chat, model)
        if key not in self._templates:
            rid = "@RID@"
            if chat:
                events = (_chat_chunk(rid, model, "", "assistant", None), _chat_chunk(rid, model, " tok", None, None),
                          _chat_chunk(rid, model, " tok", None, "length"))
            else:
                events = (_text_chunk(rid, model, "", None), _text_chunk(rid, model, " tok", None),
                          _text_chunk(rid, model, " tok", "length"))
            usage = _usage_event(rid, model).replace(b'"@PT@"', b"@PT@").replace(b'"@CT@"', b"@CT@")
            self._templates[key] = (*events, usage)
        return self._templates[key]

    def log(self, s: Stream, status: int) -> None:
        if self.cfg.log is None:
            return
        rec = {"rid": s.rid, "status": status, "arrival_ns": s.arrival_ns, "send_ns": s.send_ns,
               "tokens": len(s.send_ns), "late_ns_max": s.late_ns_max}
        self.cfg.log.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self.cfg.log.flush()


class HttpProtocol(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buf = bytearray()
        self.busy = False
        self.closed = False
        self.transport: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._maybe_handle()

    def _maybe_handle(self) -> None:
        if self.busy:
            return
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if len(self.buf) < end + 4 + length:
            return
        body = bytes(self.buf[end + 4:end + 4 + length])
        del self.buf[:end + 4 + length]
        arrival = time.perf_counter_ns()
        parts = head[0].split(" ")
        self.busy = True
        self._route(parts[0], parts[1] if len(parts) > 1 else "/", headers, body, arrival)

    def _route(self, method: str, path: str, headers: dict[str, str], body: bytes, arrival: int) -> None:
        if method == "GET" and path in ("/health", "/v1/models"):
            self.respond(200, b'{"object":"list","data":[{"id":"fake"}]}')
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            self.respond(404, b'{"error":"not found"}')
            return
        srv = self.server
        srv.count += 1
        rid = headers.get("x-request-id", f"srv-{srv.count}")
        if srv.cfg.fail_every and srv.count % srv.cfg.fail_every == 0:
            self.respond(500, b'{"object":"error","message":"injected failure","code":500}')
            srv.log(Stream(self, rid, arrival, 0, 0, b"", b"", b""), 500)
            return
        try:
            req = json.loads(body)
        except ValueError:
            self.respond(400, b'{"error":"bad json"}')
            return
        self._start_stream(path == "/v1/chat/completions", req, rid, arrival)

    def _start_stream(self, chat: bool, req: dict[str, object], rid: str, arrival: int) -> None:
        cfg = self.server.cfg
        model = str(req.get("model", "fake"))
        n = int(str(req.get("max_tokens") or req.get("max_completion_tokens") or 16))
        if cfg.max_tokens_cap > 0:
            n = min(n, cfg.max_tokens_cap)
        opts = req.get("stream_options")
        usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        first, token, last, usage_tpl = self.server.templates(chat, model)
        rid_b = rid.encode()
        token, last = _fill(token, rid_b), _fill(last, rid_b)
        first = _fill(first, rid_b) if cfg.empty_first_chunk else b""
        tail = b""
        if usage:
            tail = _fill(usage_tpl.replace(b"@PT@", b"%d" % _prompt_words(req)).replace(b"@CT@", b"%d" % n), rid_b)
        tail += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        head = _HEAD_200
        self.transport.write(head + first)
        if n <= 0:
            self.transport.write(tail)
            self.busy = False
            return
        s = Stream(self, rid, arrival, arrival + cfg.ttft_ns, n, token, last, tail)
        self.server.wheel.add(s)

    def finish(self, s: Stream, status: int) -> None:
        s.done = True
        self.server.log(s, status)
        self.busy = False
        if self.buf:
            self._maybe_handle()

    def respond(self, status: int, body: bytes) -> None:
        head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'X')}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()
        self.transport.write(head + body)
        self.busy = False
        if self.buf:
            self._maybe_handle()


async def serve(args: argparse.Namespace) -> None:
    log = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115
    cfg = Config(ttft_ns=int(args.ttft_ms * 1e6), itl_ns=int(args.itl_ms * 1e6), tick_ns=args.tick_us * 1000,
                 empty_first_chunk=not args.no_empty_first_chunk, fail_every=args.fail_every,
                 stall_after=args.stall_after, log=log, max_tokens_cap=args.max_tokens_cap)
    server = Server(cfg)
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: HttpProtocol(server), args.host, args.port, backlog=4096)
    port = srv.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    srv.close()
    if log is not None:
        log.close()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=20.0)
    p.add_argument("--tick-us", type=int, default=1000)
    p.add_argument("--no-empty-first-chunk", action="store_true")
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--stall-after", type=int, default=0)
    p.add_argument("--max-tokens-cap", type=int, default=0, help="answer at most this many tokens (0: as asked)")
    p.add_argument("--log", default="")
    p.add_argument("--cpu", type=int, default=-1, help="pin to this core")
    args = p.parse_args(argv)
    if args.cpu >= 0 and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {args.cpu})
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()


if __name__ == "__main__":
    main()
