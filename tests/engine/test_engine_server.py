"""The engine over real HTTP: a ``python -m kit.engine`` subprocess, talked to with urllib."""

from __future__ import annotations

import http.client
import json
import signal
import subprocess
import sys
import threading
import time
from typing import Any
from urllib.parse import urlparse

import pytest
from engine_helpers import ROOT, SMALL, EngineProcess

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def chat_body(text: str, max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"model": "kit-moe", "messages": [{"role": "system", "content": "be brief"},
                                             {"role": "user", "content": text}],
            "max_tokens": max_tokens, "ignore_eos": True, **extra}


# ----------------------------------------------------------------------------------------- basics


def test_health_and_models(engine: EngineProcess) -> None:
    status, _, body = engine.request("GET", "/health")
    assert (status, body) == (200, b"ok")
    status, _, body = engine.request("GET", "/v1/models")
    assert status == 200 and b'"kit-moe"' in body


def test_stream_chat_with_usage(engine: EngineProcess) -> None:
    events = engine.stream(CHAT, chat_body("one two three four", 7, stream_options={"include_usage": True},
                                           seed=1, temperature=0.0))
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    # like sglang: a role-only first chunk without content, so TTFT must come from the first content chunk
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    tokens = [c["choices"][0]["delta"]["content"] for c in chunks[1:] if c["choices"]
              and c["choices"][0]["delta"].get("content")]
    assert len(tokens) == 7 and all(t.startswith(" w") for t in tokens)
    final = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(final) == 1 and final[0]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]
    assert usage["choices"] == []
    # prompt tokens = words of all messages ("be brief" + 4 words)
    assert usage["usage"] == {"prompt_tokens": 6, "completion_tokens": 7, "total_tokens": 13}
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "kit-moe" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1


def test_stream_completions_with_usage(engine: EngineProcess) -> None:
    body = {"model": "kit-moe", "prompt": "a b c d e f g h i j", "max_tokens": 33, "ignore_eos": True,
            "stream_options": {"include_usage": True}}
    events = engine.stream(COMPLETIONS, body)
    assert events[-1] == "[DONE]"
    texts = [c["choices"][0]["text"] for c in events[:-1] if c["choices"] and c["choices"][0]["text"]]
    assert len(texts) == 33
    assert events[-2]["usage"] == {"prompt_tokens": 10, "completion_tokens": 33, "total_tokens": 43}
    assert events[-3]["choices"][0]["finish_reason"] == "length"


def test_stream_without_usage_has_no_usage_chunk(engine: EngineProcess) -> None:
    events = engine.stream(COMPLETIONS, {"prompt": "x y", "max_tokens": 2})
    assert all("usage" not in e for e in events[:-1]) and events[-1] == "[DONE]"


def test_non_streaming_and_deterministic(engine: EngineProcess) -> None:
    status, first = engine.post_json(CHAT, chat_body("same words again", 9))
    assert status == 200 and first["object"] == "chat.completion"
    assert first["choices"][0]["finish_reason"] == "length"
    assert first["usage"]["completion_tokens"] == 9
    assert first["choices"][0]["message"]["content"].count(" w") == 9
    _, second = engine.post_json(CHAT, chat_body("same words again", 9))
    assert second["choices"][0]["message"] == first["choices"][0]["message"]  # greedy
    status, comp = engine.post_json(COMPLETIONS, {"prompt": "same words again", "max_tokens": 4})
    assert status == 200 and comp["choices"][0]["text"].count(" w") == 4
    assert comp["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def test_sse_chunks_arrive_as_they_are_made(engine: EngineProcess) -> None:
    """The first token arrives long before the last one (no buffering of the whole response)."""
    url = urlparse(engine.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("POST", COMPLETIONS, body=b'{"prompt": "p q r", "max_tokens": 400, "stream": true}',
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Encoding") is None
    t0 = time.monotonic()
    first = resp.readline()
    t_first = time.monotonic() - t0
    rest = resp.read()
    t_all = time.monotonic() - t0
    conn.close()
    assert first.startswith(b"data: ")
    assert rest.endswith(b"data: [DONE]\n\n")
    assert t_first < t_all / 2


def test_client_disconnect_frees_the_slot(engine: EngineProcess) -> None:
    before = engine.metrics()["kit_engine_requests_aborted_total"]
    url = urlparse(engine.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("POST", COMPLETIONS, body=b'{"prompt": "go on", "max_tokens": 4096, "stream": true}',
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.readline().startswith(b"data: ")
    conn.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = engine.metrics()
        if m["kit_engine_requests_running"] == 0 and m["kit_engine_requests_aborted_total"] == before + 1:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the engine kept generating for a client that went away")


# ----------------------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("path", "raw", "status"),
    [
        (CHAT, b"{not json", 400),
        (CHAT, b"[1, 2]", 400),
        (CHAT, b'{"model": "kit-moe"}', 400),
        (CHAT, b'{"messages": "hi"}', 400),
        (CHAT, b'{"messages": [{"role": "user", "content": "   "}]}', 400),
        (COMPLETIONS, b'{"model": "kit-moe"}', 400),
        (COMPLETIONS, b'{"prompt": 5}', 400),
        (COMPLETIONS, b'{"prompt": "hi", "max_tokens": 0}', 400),
        (COMPLETIONS, b'{"prompt": "hi", "max_tokens": 100000}', 400),
        (COMPLETIONS, b'{"prompt": "hi", "max_tokens": "5"}', 400),
        (COMPLETIONS, b'{"prompt": "hi", "stream": "yes"}', 400),
        (COMPLETIONS, b'{"prompt": "hi", "model": "gpt-4"}', 404),
        (CHAT, b'{"messages": [{"role": "user", "content": "hi"}], "model": "other"}', 404),
    ],
)
def test_errors(engine: EngineProcess, path: str, raw: bytes, status: int) -> None:
    got, headers, body = engine.request("POST", path, raw=raw)
    assert got == status, body
    assert headers["Content-Type"].startswith("application/json")
    error = json.loads(body)["error"]
    assert error["message"] and error["type"]


# ---------------------------------------------------------------------------------------- metrics


def test_metrics_counters_move(engine: EngineProcess) -> None:
    before = engine.metrics()
    assert before['kit_engine_info{oea_k0="0",top_k="4",experts="16",layers="2",hidden="64",expert_ffn="64",'
                  'seed="0"}'] == 1
    engine.stream(COMPLETIONS, {"prompt": "m n o", "max_tokens": 5})
    after = engine.metrics()
    assert after['kit_engine_steps_total{phase="decode"}'] - before['kit_engine_steps_total{phase="decode"}'] == 4
    assert after['kit_engine_steps_total{phase="prefill"}'] - before['kit_engine_steps_total{phase="prefill"}'] == 1
    assert after["kit_engine_decode_tokens_total"] - before["kit_engine_decode_tokens_total"] == 4
    assert after["kit_engine_prefill_tokens_total"] - before["kit_engine_prefill_tokens_total"] == 3
    assert after["kit_engine_step_seconds_sum"] > before["kit_engine_step_seconds_sum"]
    for layer in range(2):
        count = f'kit_engine_unique_experts_count{{layer="{layer}"}}'
        total = f'kit_engine_unique_experts_sum{{layer="{layer}"}}'
        assert after[count] - before[count] == 4
        assert after[total] - before[total] == 4 * 4  # batch 1, top-4: 4 experts per step
    assert after["kit_engine_requests_running"] == 0 and after["kit_engine_requests_waiting"] == 0


def _concurrent_streams(engine: EngineProcess, n: int, max_tokens: int) -> list[int]:
    counts: list[int] = [0] * n

    def one(i: int) -> None:
        body = {"prompt": f"user {i} asks question number {i * 7} about topic {i % 5}", "max_tokens": max_tokens}
        events = engine.stream(COMPLETIONS, body)
        counts[i] = sum(1 for e in events[:-1] if e["choices"] and e["choices"][0]["text"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return counts


def _window(engine: EngineProcess, n: int, max_tokens: int) -> tuple[float, float]:
    """(mean unique experts per layer per decode step, mean batch size) over a window of n streams."""
    before = engine.metrics()
    assert _concurrent_streams(engine, n, max_tokens) == [max_tokens] * n
    after = engine.metrics()

    def delta(name: str) -> float:
        return after[name] - before[name]

    sums = sum(delta(f'kit_engine_unique_experts_sum{{layer="{i}"}}') for i in range(4))
    counts = sum(delta(f'kit_engine_unique_experts_count{{layer="{i}"}}') for i in range(4))
    return sums / counts, delta("kit_engine_batch_size_sum") / delta("kit_engine_batch_size_count")


def test_oea_activates_fewer_experts_under_a_concurrent_batch(start_engine: Any) -> None:
    args = ["--experts", "64", "--top-k", "8", "--layers", "4", "--hidden", "64", "--expert-ffn", "32",
            "--max-batch", "16"]
    base = start_engine(args)
    oea = start_engine([*args, "--oea-k0", "4"])
    base_unique, base_batch = _window(base, 16, 40)
    oea_unique, oea_batch = _window(oea, 16, 40)
    assert base_batch > 8 and oea_batch > 8  # the streams really were batched together
    assert oea_unique < 0.8 * base_unique, (base_unique, oea_unique)
    assert oea.metrics()["kit_engine_requests_finished_total"] == 16


def test_max_batch_caps_the_batch(start_engine: Any) -> None:
    eng = start_engine([*SMALL, "--max-batch", "3"])
    before = eng.metrics()
    assert _concurrent_streams(eng, 8, 6) == [6] * 8
    after = eng.metrics()
    steps = after["kit_engine_batch_size_count"] - before["kit_engine_batch_size_count"]
    tokens = after["kit_engine_batch_size_sum"] - before["kit_engine_batch_size_sum"]
    assert steps >= 8 * 5 / 3  # never more than 3 sequences per decode step
    assert tokens == 8 * 5


def test_min_step_ms_is_a_floor_under_every_decode_step(start_engine: Any) -> None:
    """--min-step-ms: each decode step lasts at least that long (its tokens leave at its end), whatever the batch:
    the decode steps of 4 streams of 6 tokens (5 steps after the prefill's token) take >= 5 x 60 ms, and the
    engine's own step time adds up to >= 60 ms a step. Refused outside 0-10000 ms, NaN included."""
    eng = start_engine([*SMALL, "--min-step-ms", "60"])
    before = eng.metrics()
    t0 = time.monotonic()
    assert _concurrent_streams(eng, 4, 6) == [6] * 4
    took = time.monotonic() - t0
    after = eng.metrics()
    steps = after["kit_engine_batch_size_count"] - before["kit_engine_batch_size_count"]
    assert steps >= 5 and took >= 5 * 0.060, (steps, took)
    seconds = after["kit_engine_step_seconds_sum"] - before["kit_engine_step_seconds_sum"]
    assert seconds >= steps * 0.060, (seconds, steps)
    for bad in ("-1", "nan", "10001", "x"):
        r = subprocess.run([sys.executable, "-m", "kit.engine", "--port", "0", "--min-step-ms", bad],
                           capture_output=True, text=True, timeout=30, cwd=ROOT, check=False)
        assert r.returncode == 2 and "--min-step-ms" in r.stderr, (bad, r.stderr)


# ------------------------------------------------------------------------------------------ process


def test_sigterm_stops_quickly_even_with_streams_in_flight(start_engine: Any) -> None:
    eng = start_engine(SMALL)
    url = urlparse(eng.url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("POST", COMPLETIONS, body=b'{"prompt": "long one", "max_tokens": 4096, "stream": true}',
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.readline().startswith(b"data: ")
    took = eng.stop(timeout=10)
    assert took < 3.0
    assert eng.proc.returncode == 0
    rest = resp.read()  # the stream ends (with an error event), it does not hang
    assert b"[DONE]" not in rest
    conn.close()


def test_sigint_stops_too(start_engine: Any) -> None:
    eng = start_engine(SMALL)
    t0 = time.monotonic()
    eng.proc.send_signal(signal.SIGINT)
    eng.proc.wait(timeout=10)
    assert time.monotonic() - t0 < 3.0 and eng.proc.returncode == 0


@pytest.mark.parametrize("args", [["--top-k", "0"], ["--oea-k0", "9"], ["--experts", "4"], ["--threads", "x"]])
def test_bad_arguments_are_usage_errors(args: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-m", "kit.engine", "--port", "0", *args], cwd=ROOT, check=False,
                          capture_output=True, text=True, timeout=30, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2, proc.stderr
    assert "usage:" in proc.stderr
