"""kit_hf's ``GET /metrics`` on a real ``transformers serve`` (CPU, tiny model, continuous batching), read the way
kit's level sampler reads it (kit.telemetry.prom.scrape: prometheus_client's own parser).

Under 8 concurrent streams the continuous batch's running count (read from transformers' CB scheduler) reaches 8,
the HTTP in-flight count (kit_hf's middleware) 8, the KV-cache use rises above 0; after them everything is back to
0 and the HTTP counters say 8 started, 8 finished. Scraping at 20 Hz does not change the tokens served: the same
greedy batch, once with and once without scrapes, gives the same text."""

from __future__ import annotations

import json
import threading
import time
from http.client import HTTPConnection
from pathlib import Path

import pytest
from test_hf_serve import server

from kit.telemetry.prom import Scrape, scrape

pytest.importorskip("transformers", reason="transformers is not installed (make test installs it)")

pytestmark = pytest.mark.slow
STREAMS = 8
TOKENS = 48


def read(port: int) -> Scrape:
    return scrape(f"http://127.0.0.1:{port}/metrics", timeout_s=5, max_bytes=1 << 20, max_parsed=1000,
                  max_series=100)


def stream(port: int, i: int) -> str:
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"q{i} " + "river stone garden " * (1 + i % 3)}],
            "max_tokens": TOKENS, "stream": True, "generation_config": json.dumps({"eos_token_id": -1})}
    c = HTTPConnection("127.0.0.1", port, timeout=180)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    text = []
    for raw in r.read().decode().split("\n\n"):
        if raw.startswith("data: "):
            text.append(json.loads(raw[len("data: "):])["choices"][0]["delta"].get("content") or "")
    return "".join(text)


def batch(port: int, *, scraping: bool) -> tuple[list[str], list[Scrape]]:
    out = [""] * STREAMS
    threads = [threading.Thread(target=lambda i=i: out.__setitem__(i, stream(port, i))) for i in range(STREAMS)]
    for t in threads:
        t.start()
    seen = []
    while any(t.is_alive() for t in threads):
        if scraping:
            seen.append(read(port))
        time.sleep(0.05)
    for t in threads:
        t.join()
    return out, seen


def test_metrics_follow_a_concurrent_load(tiny_model: Path, tmp_path: Path) -> None:
    with server(tiny_model, tmp_path / "serve.log") as port:
        idle = read(port)
        assert idle.sources == {"running": "kit_hf:num_requests_running", "queued": "kit_hf:num_requests_waiting",
                                "generated_tokens": "kit_hf:generation_tokens_total",
                                "prompt_tokens": "kit_hf:prompt_tokens_total"}
        assert idle.quantities.generated_tokens == 0  # tokens: tests/hfserve/test_hf_tokens.py
        assert (idle.quantities.running, idle.quantities.queued) == (0, 0)  # no CB manager before a request
        text, seen = batch(port, scraping=True)
        quiet, _ = batch(port, scraping=False)
        after = read(port)
    assert text == quiet  # the scrapes changed no token
    assert all(len(t) > 0 for t in text)
    running = [s.quantities.running or 0 for s in seen]
    in_flight = [s.series["kit_hf:http_requests_in_flight"] for s in seen]
    kv = [s.quantities.kv_cache_usage or 0 for s in seen]
    print("scrapes", len(seen), "running max", max(running), "in flight max", max(in_flight), "kv max", max(kv))
    assert max(running) == STREAMS  # the CB batch holds every stream (64 blocks, 512 batch tokens: room for 8)
    assert max(in_flight) == STREAMS
    assert 0 < max(kv) < 1
    assert all(s.quantities.running is not None and s.quantities.running <= STREAMS for s in seen)
    assert all(s.errors == [] for s in seen)
    assert after.sources["kv_cache_usage"] == "kit_hf:kv_cache_usage_perc"
    assert (after.quantities.running, after.quantities.queued, after.quantities.kv_cache_usage) == (0, 0, 0)
    assert after.series["kit_hf:http_requests_in_flight"] == 0
    assert after.series["kit_hf:http_requests_started_total"] == after.series["kit_hf:http_requests_finished_total"]
    assert after.series["kit_hf:http_requests_started_total"] == 2 * STREAMS
    assert after.series["kit_hf:metrics_read_errors_total"] == 0
    assert "GET /metrics (kit_hf.metrics)" in (tmp_path / "serve.log").read_text()
