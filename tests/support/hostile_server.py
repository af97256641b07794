"""A hostile OpenAI-style streaming server for tests (stdlib only): it answers some requests as a broken or
malicious server would, and the others as a well-behaved one, so a test sees both what kit cuts and what it keeps.

Run: ``python tests/support/hostile_server.py --port 0 --log FILE``; it prints ``LISTENING <port>`` once it
accepts connections. What a request gets is chosen by the ``model`` it asks for, ``<mode>/<every>``: recorded
requests (``X-Request-Id`` ``w<process>-<ticket>``) whose ticket is a multiple of ``every`` get ``mode``; warm-up
requests and the others get a normal response (one SSE event per token asked, a usage chunk, ``[DONE]``).

Modes:

- ``error-body``: HTTP 500 whose body never ends (sent as fast as the socket takes it);
- ``endless-line``: HTTP 200 and a ``data:`` line that never ends;
- ``event-flood``: HTTP 200 and tiny content events without end;
- ``comment-flood``: HTTP 200 and SSE comment lines (``: ping``) without end, no event ever;
- ``huge-headers``: a status line and a header that never ends;
- ``slow-headers``: a status line, then a header one byte every 50 ms;
- ``usage=<json>``: a normal stream whose usage chunk says ``completion_tokens: <json>`` (e.g. ``usage=-5``,
  ``usage=1e30``, ``usage=`` + 4000 digits);
- ``inflate=<pct>``: a normal stream whose usage over-reports the tokens sent by ``pct`` percent;
- ``overdeliver=<n>``: ``n`` content events whatever was asked, and no usage chunk;
- ``after-done``: a normal stream, then one more content event after ``[DONE]``;
- ``eol=cr`` / ``eol=crlf``: a normal stream whose SSE lines end in CR alone / CRLF (the SSE spec allows both);
  ``eol=crlf-split``: CRLF, each event written in two parts split between its CR and its LF; ``eol=mixed``:
  the events' line ends cycle CR alone, LF, CRLF, the whole stream in one write (one read holds all three).

With ``--log FILE`` one JSON line per request: ``{"rid", "mode", "start", "end", "sent"}`` (``time.monotonic()``
when the request's body arrived and when the server stopped answering, i.e. the client closed or the response
ended, and the bytes sent), so a test can check from outside the client how long each request lasted.
An endless answer stops after ``--give-up-s`` (default 120) even if the client never closes.
"""

from __future__ import annotations

import argparse
import json
import socket
import socketserver
import sys
import threading
import time
from typing import IO

BLOCK = 64 << 10
ENDLESS = ("error-body", "endless-line", "event-flood", "comment-flood", "huge-headers", "slow-headers")
_lock = threading.Lock()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    log: IO[str] | None = None
    give_up_s = 120.0


def _event(payload: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _content(i: int) -> bytes:
    return _event({"id": "x", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]})


class Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = self.request.makefile("rb")
        while True:
            head = self._head(f)
            if head is None:
                return
            rid, length = head
            body = json.loads(f.read(length) or b"{}")
            model, tokens = str(body.get("model", "")), int(body.get("max_tokens") or 16)
            mode, _, every = model.partition("/")
            ticket = rid.rsplit("-", 1)[-1]
            hostile = "-warm-" not in rid and ticket.isdigit() and int(ticket) % max(1, int(every or 1)) == 0
            start, sent = time.monotonic(), 0
            try:
                sent = self._answer(mode if hostile else "normal", tokens)
                keep = True
            except OSError:  # the client closed: the end of an endless answer
                keep = False
            self._log(rid, mode if hostile else "normal", start, sent)
            if not keep or (hostile and mode in ENDLESS):
                return

    @staticmethod
    def _head(f: IO[bytes]) -> tuple[str, int] | None:
        line = f.readline(65536)
        if not line:
            return None
        rid, length = "", 0
        while True:
            h = f.readline(65536)
            if h in (b"\r\n", b"\n", b""):
                break
            name, _, value = h.decode("latin-1").partition(":")
            if name.strip().lower() == "x-request-id":
                rid = value.strip()
            elif name.strip().lower() == "content-length":
                length = int(value.strip())
        return rid, length

    def _send(self, data: bytes) -> int:
        self.request.sendall(data)
        return len(data)

    def _endless(self, head: bytes, unit: bytes, pause: float = 0.0) -> int:
        sent = self._send(head)
        block = unit * max(1, BLOCK // len(unit)) if not pause else unit
        deadline = time.monotonic() + self.server.give_up_s
        while time.monotonic() < deadline:
            sent += self._send(block)
            if pause:
                time.sleep(pause)
        return sent

    def _answer(self, mode: str, tokens: int) -> int:
        sse_head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
                    b"Connection: keep-alive\r\n\r\n")
        if mode == "error-body":
            return self._endless(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                                 b"Connection: close\r\n\r\nsomething broke: ", b"x")
        if mode == "endless-line":
            return self._endless(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
                                 b"data: {\"choices\":[{\"delta\":{\"content\":\"", b"y")
        if mode == "event-flood":
            return self._endless(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
                                 _content(0))
        if mode == "comment-flood":
            return self._endless(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n",
                                 b": ping\n")
        if mode == "huge-headers":
            return self._endless(b"HTTP/1.1 200 OK\r\nX-Junk: ", b"z")
        if mode == "slow-headers":
            return self._endless(b"HTTP/1.1 200 OK\r\nX-Slow: ", b"s", pause=0.05)
        sent = self._send(sse_head)
        eol = {"eol=cr": b"\r", "eol=crlf": b"\r\n", "eol=crlf-split": b"\r\n"}.get(mode, b"\n")
        held: list[bytes] = []  # eol=mixed: every event, sent at the end in one write

        def event(data: bytes) -> int:
            if mode == "eol=mixed":
                held.append(data.replace(b"\n", (b"\r", b"\n", b"\r\n")[len(held) % 3]))
                return 0
            data = data.replace(b"\n", eol)
            if mode != "eol=crlf-split":
                return self._send(_chunk(data))
            cut = data.index(b"\r") + 1
            n = self._send(_chunk(data[:cut]))
            time.sleep(0.002)  # TCP_NODELAY: the two parts reach the client apart
            return n + self._send(_chunk(data[cut:]))

        events = int(mode.removeprefix("overdeliver=")) if mode.startswith("overdeliver=") else tokens
        for i in range(events):
            sent += event(_content(i))
            time.sleep(0.001)
        usage = str(tokens).encode()
        if mode.startswith("usage="):
            usage = mode.removeprefix("usage=").encode()
        elif mode.startswith("inflate="):
            usage = str(round(tokens * (1 + float(mode.removeprefix("inflate=")) / 100))).encode()
        if events == tokens:
            sent += event(b'data: {"id":"x","choices":[],"usage":{"prompt_tokens":24,"completion_tokens":'
                          + usage + b"}}\n\n")
        sent += event(b"data: [DONE]\n\n")
        if mode == "after-done":
            sent += event(_content(tokens))
        if held:
            sent += self._send(_chunk(b"".join(held)))
        sent += self._send(b"0\r\n\r\n")
        return sent

    def _log(self, rid: str, mode: str, start: float, sent: int) -> None:
        if self.server.log is None:
            return
        line = json.dumps({"rid": rid, "mode": mode, "start": start, "end": time.monotonic(), "sent": sent})
        with _lock:
            self.server.log.write(line + "\n")
            self.server.log.flush()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", default=None)
    ap.add_argument("--give-up-s", type=float, default=120.0)
    args = ap.parse_args(argv)
    with Server(("127.0.0.1", args.port), Handler) as srv:
        srv.log = open(args.log, "a", encoding="utf-8") if args.log else None  # noqa: SIM115 (lives with srv)
        srv.give_up_s = args.give_up_s
        print(f"LISTENING {srv.server_address[1]}", flush=True)
        srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
