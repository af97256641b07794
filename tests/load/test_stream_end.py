"""How a stream ends, against a real HTTP server that frames its SSE as ``transformers serve`` 5.24 does:
a role-only first chunk, one content event per token, a last event with ``finish_reason`` and ``usage``,
and no ``data: [DONE]``. The load generator must end each stream there (chunked or close-delimited body),
count the tokens and the server's usage alike, fail a body cut off before a finish_reason, and send the
request fields of the level's dialect."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kit.load import LoadSession

from ._support import make_spec, read_records


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _choice(delta: dict[str, str], finish: str | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"delta": delta, "index": 0}
    if finish is not None:
        choice["finish_reason"] = finish
    return {"id": "x", "choices": [choice], "model": "m", "object": "chat.completion.chunk"}


def events(style: str, n: int, prompt: int) -> list[bytes]:
    usage = {"completion_tokens": n, "prompt_tokens": prompt, "total_tokens": n + prompt}
    out = [_event(_choice({"role": "assistant"}))]
    if style == "finish-in-last-token":  # the last content event carries the finish_reason; usage comes alone
        out += [_event(_choice({"content": f"t{i}"})) for i in range(n - 1)]
        out += [_event(_choice({"content": "end"}, "length")), _event({"id": "x", "choices": [], "usage": usage})]
        return out
    out += [_event(_choice({"content": f"t{i}"})) for i in range(n)]
    if style == "cut":  # the body ends after the tokens, with neither a finish_reason nor [DONE]
        return out
    return [*out, _event({**_choice({}, "length"), "usage": usage})]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        prompt = len(body["messages"][0]["content"].split())
        parts = events(self.server.style, int(body["max_tokens"]), prompt)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if self.server.style == "close":  # no length, not chunked: the body ends when the connection closes
            self.send_header("Connection", "close")
            self.end_headers()
            for p in parts:
                self.wfile.write(p)
                self.wfile.flush()
            self.close_connection = True
            return
        self.send_header("Transfer-Encoding", "chunked")
        if self.server.style == "chunked-close":  # legal HTTP/1.1: the client closes the socket once the body ends
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        for p in parts:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(p), p))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: Any) -> None:
        pass


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, style: str) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.style = style
        self.bodies: list[dict[str, Any]] = []

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def servers() -> Iterator[dict[str, Server]]:
    made = {s: Server(s) for s in ("chunked", "chunked-close", "close", "finish-in-last-token", "cut")}
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in made.values()]
    for t in threads:
        t.start()
    yield made
    for s in made.values():
        s.shutdown()
        s.server_close()


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_streams_without_done_end_at_the_finish_reason(servers: dict[str, Server], tmp_path: Path) -> None:
    n = 6
    with LoadSession(processes=1) as load:
        results = {}
        for style, srv in servers.items():
            spec = make_spec(srv.base_url, concurrency=2, requests=4, warmup_requests=1 if style != "cut" else 0,
                             output_tokens=n, dialect="transformers", tags={"arm": style, "repeat": 1, "level": 2})
            results[style] = (load.run_level(spec, tmp_path / style), spec)
    for style in ("chunked", "chunked-close", "close", "finish-in-last-token"):
        res, spec = results[style]
        recs = read_records(res.records_path)
        assert res.ok == len(recs) == 4 and res.errors == 0, (style, recs[0]["error"])
        for r in recs:
            assert r["client_tokens"] == r["usage_completion_tokens"] == n, style
            assert r["usage_prompt_tokens"] == spec.prompt_tokens
    res, _ = results["cut"]
    recs = read_records(res.records_path)
    assert res.ok == 0 and res.errors == 4
    assert {r["error"] for r in recs} == {"stream ended without [DONE] or a finish_reason"}
    assert all(r["client_tokens"] == n and r["usage_completion_tokens"] is None for r in recs)
    # the transformers dialect: a fixed length through generation_config (a JSON string), no ignore_eos
    for body in servers["chunked"].bodies:
        assert body["generation_config"] == '{"eos_token_id": -1}' and json.loads(body["generation_config"])
        assert "ignore_eos" not in body and "stream_options" not in body
        assert body["stream"] is True and body["max_tokens"] == n


def test_an_unknown_dialect_is_refused_before_any_driver_runs(tmp_path: Path) -> None:
    from kit.errors import LoadError
    from kit.load.spec import validate

    with pytest.raises(LoadError, match="dialect 'vllm' is not one of sglang, transformers"):
        validate(make_spec("http://127.0.0.1:1", dialect="vllm"))


def test_other_dialects_still_need_done(servers: dict[str, Server], tmp_path: Path) -> None:
    """Only transformers serve ends a stream at its finish_reason: for sglang (and OpenAI, vLLM) a body that stops
    after its last token and finish_reason but before `data: [DONE]` was cut, and the request fails as before."""
    with LoadSession(processes=1) as load:
        for style in ("chunked", "close", "finish-in-last-token"):
            spec = make_spec(servers[style].base_url, concurrency=2, requests=3, warmup_requests=0, output_tokens=5,
                             dialect="sglang", tags={"arm": style, "repeat": 1, "level": 2})
            res = load.run_level(spec, tmp_path / style)
            recs = read_records(res.records_path)
            assert res.ok == 0 and res.errors == 3, style
            cut = "connection closed mid-stream" if style == "close" else "stream ended without [DONE]"
            assert {r["error"] for r in recs} == {cut}, style
            assert all(r["client_tokens"] == 5 for r in recs)
