"""A leaky OpenAI-style streaming server for tests (stdlib only), run by ``kit run`` as ``server.command``: it echoes
the secrets it is given (the ``Authorization`` header kit's load sends, a ``server.pass_env`` variable) wherever a
careless or hostile server would, so a test can check that none of it reaches a bundle, a log or kit's output.

Run: ``python tests/support/leaky_server.py --host H --port P --modes a,b [--secret-env NAME]``. Every request that a
mode does not change gets a normal answer: one SSE event per token asked, a usage chunk, ``[DONE]``; ``GET /health``
answers 200, ``/metrics`` a small exposition, ``/server_info`` a small JSON object. "Odd requests" are the recorded
ones whose ticket (``X-Request-Id`` ``w<process>-<ticket>``) is odd; warm-up requests are never odd. Modes:

- ``echo401``: every POST (warm-up too) gets HTTP 401 whose body quotes the Authorization header as is and
  JSON-escaped (``\\/``, ``\\u003c``), and the server prints it to its log;
- ``echoevent``: odd POSTs get HTTP 200 and an SSE error event quoting the header's credentials JSON-escaped
  (``\\/``, ``\\u003C``), and the log the same;
- ``passleak``: odd POSTs get HTTP 500 quoting the ``--secret-env`` variable's value; ``/metrics`` carries it as a
  label value of a kept family and of another, ``/server_info`` inside a command line; each POST takes 0.25 s
  (so a level lasts long enough for the telemetry to read /metrics); at start the server prints a
  2 MiB line holding it where kit's old log pump cut such a line (SPLIT_AT), then the value JSON-escaped;
- ``flood``: at start FLOOD_START_BYTES of lines, and before answering each POST FLOOD_PER_REQUEST bytes and then a
  line ``request <rid> done <value of --secret-env>``: a log pump that stops draining the pipe blocks the answer.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SPLIT_AT = 17 * 65536 - 10  # the secret's offset in the long line: kit's old pump cut it at 17 reads of 64 KiB
LONG_LINE = 2 << 20
FLOOD_START_BYTES = 6 << 20
FLOOD_PER_REQUEST = 512 << 10
FLOOD_LINE = b"y" * 4095 + b"\n"
_out = threading.Lock()


def escaped(text: str, upper: bool = False) -> str:
    """``text`` JSON-escaped as some servers write it: ``/`` as ``\\/`` and ``<`` ``>`` ``&`` as ``\\u00xx``."""
    out = json.dumps(text)[1:-1].replace("/", "\\/")
    for c in "<>&":
        code = f"\\u{ord(c):04x}"
        out = out.replace(c, code.upper().replace("\\U", "\\u") if upper else code)
    return out


def log(line: str | bytes) -> None:
    data = line if isinstance(line, bytes) else (line + "\n").encode()
    with _out:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _send(self, status: int, body: bytes, ctype: str = "text/plain") -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        secret = self.server.secret
        if self.path.startswith("/health"):
            self._send(200, b"ok")
        elif self.path.startswith("/metrics"):
            labels = f'{{token="{secret}"}}' if "passleak" in self.server.modes else ""
            body = (f"kit_engine_requests_running{labels} 1\nkit_engine_requests_waiting 0\n"
                    f"other_family{labels} 2\n").encode()
            self._send(200, body)
        elif self.path.startswith("/server_info"):
            info = {"version": "leaky-1", "max_total_num_tokens": 4096,
                    "launch": f"serve --model m --auth {secret}" if "passleak" in self.server.modes else "serve"}
            self._send(200, json.dumps(info).encode(), "application/json")
        else:
            self._send(404, b"")

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        auth = str(self.headers.get("Authorization"))
        rid = str(self.headers.get("X-Request-Id"))
        ticket = rid.rsplit("-", 1)[-1]
        odd = "-warm-" not in rid and ticket.isdigit() and int(ticket) % 2 == 1
        modes, secret = self.server.modes, self.server.secret
        if "flood" in modes:
            log(FLOOD_LINE * (FLOOD_PER_REQUEST // len(FLOOD_LINE)))
            log(f"request {rid} done {secret}")
        if "echo401" in modes:
            log(f"request with Authorization: {auth} ({escaped(auth)})")
            self._send(401, f'invalid api key {auth}; {{"error":"bad key {escaped(auth)}"}}'.encode())
            return
        if "passleak" in modes:
            time.sleep(0.25)  # a level of a few requests lasts over a second: the telemetry samples /metrics
        if "passleak" in modes and odd:
            self._send(500, f"internal error, env token={secret}".encode())
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data: bytes) -> None:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        if "echoevent" in modes and odd:
            credentials = auth.split(" ", 1)[-1]
            log(f"rejecting {escaped(credentials, upper=True)}")
            chunk(b'data: {"error":{"message":"key ' + escaped(credentials, upper=True).encode() + b' rejected"}}\n\n')
        else:
            for i in range(int(body.get("max_tokens") or 8)):
                chunk(b'data: {"choices":[{"index":0,"delta":{"content":"t%d "}}]}\n\n' % i)
            tokens = int(body.get("max_tokens") or 8)
            chunk(b'data: {"choices":[],"usage":{"prompt_tokens":8,"completion_tokens":%d}}\n\n' % tokens)
        chunk(b"data: [DONE]\n\n")
        chunk(b"")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    modes: frozenset[str] = frozenset()
    secret = ""


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--modes", default="")
    ap.add_argument("--secret-env", default="")
    args = ap.parse_args(argv)
    modes = set(filter(None, args.modes.split(",")))
    secret = os.environ.get(args.secret_env, "") if args.secret_env else ""
    log(f"leaky server starting, modes {sorted(modes)}")
    if "passleak" in modes:
        log("z" * SPLIT_AT + secret + "z" * (LONG_LINE - SPLIT_AT))
        log(f"plain line with the secret {secret} and escaped {escaped(secret)}")
    if "flood" in modes:
        log(FLOOD_LINE * (FLOOD_START_BYTES // len(FLOOD_LINE)))
    srv = Server((args.host, args.port), Handler)
    srv.modes, srv.secret = frozenset(modes), secret
    log(f"listening on http://{args.host}:{args.port}")
    srv.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
