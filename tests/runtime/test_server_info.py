"""kit.runtime.server_info against a real HTTP server (the standard library's), answering as sglang 0.5.23's
/server_info does: the resolved arguments flat at the top level, the scheduler's max_total_num_tokens, the
version, and from the OEA image the patch's marker (tests/oea/test_oea_marker.py reads a real one through the
patched sglang source)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from kit.files.schema import REGISTRY
from kit.files.server_info import ServerInfoFile
from kit.runtime import ServerSpec
from kit.runtime import server_info as si

SECRET = "hf_server_info_secret_42"


class Answers:
    def __init__(self) -> None:
        self.status = 200
        self.body = b"{}"


@pytest.fixture
def server() -> Iterator[tuple[int, Answers]]:
    answers = Answers()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(answers.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answers.body)))
            self.end_headers()
            self.wfile.write(answers.body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield int(httpd.server_address[1]), answers
    httpd.shutdown()
    httpd.server_close()


def spec(port: int, tmp_path: Path) -> ServerSpec:
    return ServerSpec(name="t", arm="oea", command=["x"], env={}, secret_env={"HF_TOKEN": SECRET},
                      host="127.0.0.1", port=port, readiness_path="/health", ready_timeout_s=1, stop_grace_s=1,
                      log_path=tmp_path / "server.log", labels={})


def sglang_like(marker: dict[str, Any] | None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "model_path": "/model", "tp_size": 8, "moe_runner_backend": "flashinfer_cutlass", "max_running_requests": 128,
        "api_key": "sk-very-secret", "admin_api_key": None, "hf_token": "hf_abc", "tokenizer_path": "/model",
        "launch_command": f"python3 -m sglang.launch_server --model-path /model --tp-size 8 # {SECRET}",
        "max_total_num_tokens": 312000, "max_req_input_len": 200000, "status": "ready",
        "internal_states": [{"max_total_num_tokens": 312000, "last_gen_throughput": 0.0}],
        "version": "0.5.23", "frontend": "python",
    }
    if marker is not None:
        doc["kit_oea_patch"] = marker
    return doc


def test_the_engine_account_is_kept_with_kit_fields_pulled_out_and_secrets_redacted(
        server: tuple[int, Answers], tmp_path: Path) -> None:
    port, answers = server
    answers.body = json.dumps(sglang_like({"patch": "kit-oea", "sglang_version": "0.5.23"})).encode()
    got = si.read_server_info(spec(port, tmp_path), "/server_info")
    assert (got.status, got.error, got.version) == (200, None, "0.5.23")
    assert (got.max_total_num_tokens, got.max_running_requests) == (312000, 128)
    assert got.patch is not None and got.patch["sglang_version"] == "0.5.23" and got.patch["patch"] == "kit-oea"
    assert got.info is not None and got.info["api_key"] == "***" and got.info["admin_api_key"] is None
    assert got.info["hf_token"] == "***" and got.info["tokenizer_path"] == "/model"
    assert got.info["tp_size"] == 8 and got.info["moe_runner_backend"] == "flashinfer_cutlass"
    text = json.dumps(got.to_json())
    assert SECRET not in text and "sk-very-secret" not in text
    assert REGISTRY["cells/*/server_info.json"] is ServerInfoFile
    ServerInfoFile.model_validate_json(text)  # reads back


def test_an_unpatched_engine_has_no_marker_and_internal_states_fill_a_missing_figure(
        server: tuple[int, Answers], tmp_path: Path) -> None:
    port, answers = server
    doc = sglang_like(None)
    del doc["max_total_num_tokens"]
    answers.body = json.dumps(doc).encode()
    got = si.read_server_info(spec(port, tmp_path), "/server_info")
    assert got.patch is None and got.max_total_num_tokens == 312000


@pytest.mark.parametrize(("status", "body", "error"), [
    (404, b'{"detail": "Not Found"}', "HTTP 404"),
    (200, b"<html>", "not JSON"),
    (200, b"[1, 2]", "not a JSON object (a list)"),
])
def test_what_is_not_an_account_is_said_not_kept(server: tuple[int, Answers], tmp_path: Path, status: int,
                                                 body: bytes, error: str) -> None:
    port, answers = server
    answers.status, answers.body = status, body
    got = si.read_server_info(spec(port, tmp_path), "/server_info")
    assert got.status == status and got.error is not None and got.error.startswith(error) and got.info is None


def test_the_read_is_bounded(server: tuple[int, Answers], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port, answers = server
    answers.body = json.dumps(sglang_like(None)).encode()
    monkeypatch.setattr(si, "MAX_BYTES", 100)
    got = si.read_server_info(spec(port, tmp_path), "/server_info")
    assert got.error == "the answer is larger than 100 bytes; kept none of it" and got.size_bytes == 101


def test_a_server_that_cannot_be_asked_gives_status_null(tmp_path: Path) -> None:
    from kit.plumbing.net import free_port

    got = si.read_server_info(spec(free_port(), tmp_path), "/server_info")
    assert got.status is None and got.error is not None and got.error.startswith("cannot be asked")


def test_secret_named_keys_in_any_spelling_are_masked(tmp_path: Path) -> None:
    """A review: apiKey, authorization and hf-token passed the snake_case-only pattern."""
    doc = {"apiKey": "k1", "authorization": "Bearer k2", "hf-token": "k3", "nested": [{"clientSecret": "k4"}],
           "max_total_tokens": 4096, "tokenizer": "/model", "api_key": None, "hf_tokens": "k5",
           "api_keys": ["k6", "k7"], "secrets": "k8"}
    got = si.redact(doc, spec(1, tmp_path))
    assert got == {"apiKey": "***", "authorization": "***", "hf-token": "***", "nested": [{"clientSecret": "***"}],
                   "max_total_tokens": 4096, "tokenizer": "/model", "api_key": None, "hf_tokens": "***",
                   "api_keys": "***", "secrets": "***"}
