"""What the driver really sends for a workload, seen by a real HTTP server (the standard library's, in a thread):
every body is its workload line plus load.request's fields, headers arrive (a secret one from its variable, never
written to the level's files), and a server whose usage.prompt_tokens is off by more than one token is flagged."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kit.load import run_level
from kit.manifest.load import Load
from kit.workload import Workload, encode_lines

from ._support import make_spec, read_records

SEEN: list[dict[str, Any]] = []


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        SEEN.append({"headers": dict(self.headers.items()), "body": body})
        words = len("\n".join(m["content"] for m in body["messages"]).split())
        # the server miscounts every third request by 3 tokens (by its seed: index = seed - 100)
        prompt = words + (3 if body.get("seed", 0) % 3 == 0 else 0)
        events = [{"choices": [{"index": 0, "delta": {"content": f"t{k}"}, "finish_reason": None}]}
                  for k in range(body["max_tokens"])]
        events.append({"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": body["max_tokens"]}})
        data = "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode() + b"data: [DONE]\n\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    SEEN.clear()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_the_driver_sends_the_workload(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load = Load.model_validate({"levels": [2], "prompt_tokens": 11, "output_tokens": 3, "tokenizer": "words",
                                "dataset": {"kind": "random", "input_len": 20, "output_len": 6, "range_ratio": 0.5}})
    items = Workload(load, None).level(12 + 3, seed=2)
    wl = tmp_path / "workload.jsonl"
    wl.write_bytes(encode_lines(items))
    monkeypatch.setenv("WL_TEST_SECRET", "Bearer s3cret-value")
    spec = make_spec(server, concurrency=2, requests=12, warmup_requests=3, output_tokens=6, workload=str(wl),
                     body_fields={"temperature": 0.25, "seed": 100, "chat_template_kwargs": {"x": 1}},
                     seed_per_request=True, headers={"X-Kit-Plain": "yes"},
                     header_env={"Authorization": "WL_TEST_SECRET"})
    res = run_level(spec, tmp_path / "level")
    assert res.ok == 12 and res.errors == 0
    assert len(SEEN) == 15
    for seen in SEEN:
        body, headers = seen["body"], seen["headers"]
        i = body["seed"] - 100
        item = items[i]
        assert item.messages is not None
        assert body["messages"] == [m.model_dump() for m in item.messages] and body["max_tokens"] == item.max_tokens
        assert body["temperature"] == 0.25 and body["chat_template_kwargs"] == {"x": 1}
        assert body["model"] == "fake-model" and body["ignore_eos"] is True
        assert headers["X-Kit-Plain"] == "yes" and headers["Authorization"] == "Bearer s3cret-value"
    recs = read_records(tmp_path / "level" / "records.jsonl")
    assert sorted(r["workload_index"] for r in recs) == list(range(12))  # the warm-up's are 12..14, not recorded
    for r in recs:
        item = items[r["workload_index"]]
        assert r["prompt_tokens_expected"] == item.prompt_tokens and r["max_tokens"] == item.max_tokens
        assert (r["prompt_flag"] is not None) == (r["workload_index"] % 3 == 2), r  # seed 100 + i, 102 % 3 == 0
        assert r["usage_flag"] is None  # usage checked against the request's own max_tokens
    flagged = [r for r in recs if r["prompt_flag"]]
    assert flagged and "server counted" in flagged[0]["prompt_flag"]
    for f in (tmp_path / "level").rglob("*"):
        if f.is_file():
            assert b"s3cret" not in f.read_bytes(), f


def test_an_unset_secret_variable_is_refused_before_sending(server: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from kit.errors import LoadError

    monkeypatch.delenv("WL_NOT_SET", raising=False)
    spec = make_spec(server, header_env={"Authorization": "WL_NOT_SET"})
    with pytest.raises(LoadError, match="WL_NOT_SET, which is not set"):
        run_level(spec, tmp_path / "level")
    assert SEEN == []


def test_a_long_dataset_reply_is_capped_by_its_own_max_tokens(server: str, tmp_path: Path) -> None:
    """A jsonl item asking 300 tokens while load.output_tokens is 16: the driver's event cap for load.output_tokens
    (4 x 16 + 64 = 128 events) would cut it; each request's own max_tokens sets its cap and its usage bound."""
    data = tmp_path / "long.jsonl"
    data.write_text('{"prompt": "a b c", "output_tokens": 300}\n{"prompt": "d e"}\n')
    import hashlib

    load = Load.model_validate({"levels": [1], "output_tokens": 16, "tokenizer": "words", "dataset": {
        "kind": "jsonl", "file": {"path": str(data), "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}}})
    wl = tmp_path / "workload.jsonl"
    wl.write_bytes(encode_lines(Workload(load, None).level(4 + 1, seed=0)))
    res = run_level(make_spec(server, concurrency=1, requests=4, warmup_requests=1, output_tokens=16,
                              workload=str(wl)), tmp_path / "level")
    recs = read_records(tmp_path / "level" / "records.jsonl")
    assert res.ok == 4 and res.errors == 0, recs[0]["error"]
    assert sorted(r["client_tokens"] for r in recs) == [16, 16, 300, 300]
    assert all(r["usage_flag"] is None and r["usage_completion_tokens"] == r["max_tokens"] for r in recs)
