"""The untimed quality check (kit.experiment.quality) against a real HTTP server written for the test: an
OpenAI-style chat endpoint that reads the last question of each few-shot prompt and answers it, right for some
questions, wrong, numberless or failing for others chosen in advance, so the expected score is known without kit."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import binomtest

from kit.errors import ManifestError
from kit.experiment.quality import last_number, run_quality
from kit.files.quality import QualityFile
from kit.files.schema import REGISTRY
from kit.manifest.quality import Quality

QUESTION = re.compile(r"Question: What is (\d+) plus (\d+)\?\nAnswer:$")


def items(n: int) -> list[dict[str, str]]:
    return [{"question": f"What is {a} plus {a * 3 % 11}?", "answer": f"{a} + {a * 3 % 11}. #### {a + a * 3 % 11}"}
            for a in range(n)]


class Simulator:
    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []

    def answer(self, prompt: str) -> tuple[int, str]:
        a, b = map(int, QUESTION.search(prompt).groups())  # type: ignore[union-attr]
        if a % 10 == 3:
            return 500, ""
        if a % 10 == 7:
            return 200, "I cannot say."
        total = a + b + (1 if a % 4 == 1 else 0)  # wrong by one when a % 4 == 1
        return 200, f"{a} plus {b} makes {total:,}. #### {total:,}"


def expected(asked: range) -> tuple[int, int, int]:
    correct = sum(1 for a in asked if a % 10 not in (3, 7) and a % 4 != 1)
    return correct, sum(1 for a in asked if a % 10 == 7), sum(1 for a in asked if a % 10 == 3)


@pytest.fixture
def sim() -> Iterator[tuple[str, Simulator]]:
    state = Simulator()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.in_flight += 1
                state.peak = max(state.peak, state.in_flight)
                state.bodies.append(body)
            time.sleep(0.01)
            status, text = state.answer(body["messages"][0]["content"])
            out = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
            with state.lock:
                state.in_flight -= 1
            self.send_response(status)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    httpd.shutdown()
    httpd.server_close()


def dataset(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "gsm.jsonl"
    path.write_text("".join(json.dumps(i) + "\n" for i in items(n)))
    return path


def test_the_score_is_the_one_the_simulator_was_built_to_give(sim: tuple[str, Simulator], tmp_path: Path) -> None:
    url, state = sim
    path = dataset(tmp_path, 60)
    q = Quality(dataset=str(path), shots=3, questions=50, concurrency=4, max_tokens=64)
    got = run_quality(q, url, "glm", "chat")
    correct, numberless, failed = expected(range(3, 53))
    assert (got.asked, got.correct, got.no_number, got.errors) == (50, correct, numberless, failed)
    assert got.accuracy == pytest.approx(correct / 50)
    ci = binomtest(correct, 50).proportion_ci(confidence_level=0.95, method="wilson")
    assert got.interval_95 == pytest.approx((ci.low, ci.high), abs=1e-6)
    assert got.dataset_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert [i.index for i in got.items] == list(range(3, 53))
    assert 1 < state.peak <= 4  # concurrent, never above quality.concurrency
    body = state.bodies[0]
    assert body["temperature"] == 0 and body["max_tokens"] == 64 and body["model"] == "glm"
    assert body["messages"][0]["content"].count("Question: ") == 4  # 3 worked examples + the question
    assert "#### 0" in body["messages"][0]["content"]  # the first shot's worked answer
    assert REGISTRY["cells/*/quality.json"] is QualityFile
    QualityFile.model_validate_json(json.dumps(got.to_json()))


def test_the_last_number_is_read_as_gsm8k_is_scored() -> None:
    assert last_number("so 1,234 apples. #### 1,234") == "1234"
    assert last_number("-3.0 degrees") == "-3" and last_number("none") is None


@pytest.mark.parametrize(("content", "message"), [
    ("{}\n", "line 1: not a JSON object with question and answer"),
    ('{"question": "q", "answer": "42"}\n', "line 1: the answer does not end in '#### N'"),
    ('{"question": "q", "answer": "#### 4"}\n', "1 items; shots + questions need 2"),
])
def test_a_bad_dataset_is_a_manifest_error_naming_the_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(ManifestError) as info:
        run_quality(Quality(dataset=str(path), shots=1, questions=1), "http://127.0.0.1:9", "m", "chat")
    assert message in info.value.message and str(path) in info.value.message


def test_a_missing_dataset_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError) as info:
        run_quality(Quality(dataset=str(tmp_path / "none.jsonl")), "http://127.0.0.1:9", "m", "chat")
    assert "none.jsonl: No such file or directory" in info.value.message
