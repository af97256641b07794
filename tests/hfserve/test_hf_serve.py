"""Real ``transformers serve`` processes started through kit's launcher: with KIT_OEA_K0 the served output
of a multi-stream batch differs from the baseline's; a bad knob stops the server before it loads anything;
every stream carries one content event per token and a usage that counts them."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPConnection
from pathlib import Path

import pytest
from hf_helpers import HF_ENV, IMAGE_DIR, OEA_DIR
from support.ports import free_port

from kit.plumbing.net import http_ok
from kit.plumbing.poll import poll_until
from kit.plumbing.procs import stop_group

pytest.importorskip("transformers", reason="transformers is not installed (make test installs it)")

pytestmark = pytest.mark.slow
STREAMS = 8
TOKENS = 16


def launcher_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KIT_OEA_K0"}
    path = os.pathsep.join([str(IMAGE_DIR), str(OEA_DIR), env.get("PYTHONPATH", "")])
    return {**env, **HF_ENV, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", **extra}


def launch(model: Path, port: int, log: Path, **env: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "kit_hf.serve", str(model), "--served-name", "tiny", "--continuous-batching",
           "--cb-num-blocks", "64", "--cb-max-batch-tokens", "512", "--device", "cpu", "--host", "127.0.0.1",
           "--port", str(port)]
    with log.open("wb") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=launcher_env(**env),
                                start_new_session=True)


@contextmanager
def server(model: Path, log: Path, **env: str) -> Iterator[int]:
    """A launched server on a free port, stopped as kit stops one (SIGTERM to its group); its temporary directory
    (--served-name's symlink, named in its log line) must be gone after the stop."""
    port = free_port()
    proc = launch(model, port, log, **env)

    def healthy() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        return http_ok(f"http://127.0.0.1:{port}/health")

    try:
        if not poll_until(healthy, 180, interval=0.2):
            pytest.fail(f"no /health within 180 s:\n{log.read_text()[-3000:]}")
        yield port
    finally:
        stop_group(proc.pid, 30, reap=proc.poll)  # its own session: the whole group goes
        code = proc.wait()
    home = re.search(r"; serve tiny .* \(in (/\S+)\)\n", log.read_text())
    assert code == -signal.SIGTERM and home is not None and not Path(home[1]).exists(), (code, home)


def stream(port: int, i: int) -> tuple[list[str], dict[str, int], str | None]:
    """(content pieces, usage, finish_reason) of one streamed chat request, read event by event."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": f"q{i} " + "river stone garden " * (1 + i % 4)}],
            "max_tokens": TOKENS, "stream": True, "generation_config": json.dumps({"eos_token_id": -1})}
    c = HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, r.read()
    pieces, usage, finish = [], {}, None
    for raw in r.read().decode().split("\n\n"):
        if not raw.startswith("data: "):
            continue
        event = json.loads(raw[len("data: "):])  # no `data: [DONE]` from transformers serve: every event is JSON
        choice = event["choices"][0]
        if choice["delta"].get("content"):
            pieces.append(choice["delta"]["content"])
        finish = choice.get("finish_reason") or finish
        usage = event.get("usage") or usage
    return pieces, usage, finish


def batch(port: int) -> list[tuple[list[str], dict[str, int], str | None]]:
    out: list[tuple[list[str], dict[str, int], str | None]] = [([], {}, None)] * STREAMS

    def one(i: int) -> None:
        out[i] = stream(port, i)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def test_oea_changes_what_a_multi_stream_batch_generates(tiny_model: Path, tmp_path: Path) -> None:
    with server(tiny_model, tmp_path / "base.log") as base, server(tiny_model, tmp_path / "oea.log",
                                                                   KIT_OEA_K0="1") as oea:
        runs = {"base": batch(base), "oea": batch(oea), "base again": batch(base)}
    for name, results in runs.items():
        for pieces, usage, finish in results:
            assert len(pieces) == usage["completion_tokens"] == TOKENS, name
            assert finish == "length", name
    text = {name: ["".join(p) for p, _, _ in results] for name, results in runs.items()}
    assert text["base"] == text["base again"]  # greedy: the baseline is reproducible
    assert text["oea"] != text["base"]
    log = (tmp_path / "oea.log").read_text()
    assert "OEA k0=1 on 4 Qwen3-MoE routers, decode steps only" in log
    assert "OEA off (transformers unchanged)" in (tmp_path / "base.log").read_text()


def test_a_bad_knob_stops_the_server(tiny_model: Path, tmp_path: Path) -> None:
    """Before transformers loads (a k0 above the model's top-k is refused at model load: test_hf_oea_cb)."""
    log = tmp_path / "bad.log"
    proc = launch(tiny_model, free_port(), log, KIT_OEA_K0="4x")
    try:
        code = proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 2
    assert "KIT_OEA_K0='4x' is not an integer" in log.read_text()
