"""Secrets recognised by their name: another process's command line (a gate names what holds a port or a GPU) and a
server's JSON keys. A review's co-tenant held the manifest's port with `--api-key sk-OTHERUSER-...`: its argv went
whole into gates.jsonl, cell.json, summary.json and report.md, signed."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kit.gates.procinfo import describe
from kit.plumbing.secretnames import mask_argv, secret_name


@pytest.mark.parametrize("name", ["--api-key", "api_key", "apiKey", "API_KEY", "--hf-token", "HF_TOKEN", "token",
                                  "Authorization", "admin_api_key", "--password", "client_secret", "x-api-key",
                                  "AWS_SECRET_ACCESS_KEY", "--access-key", "credentials", "passphrase"])
def test_secret_names(name: str) -> None:
    assert secret_name(name)


@pytest.mark.parametrize("name", ["--max-total-tokens", "max_total_num_tokens", "tokenizer_path", "--tokenizer",
                                  "--ssl-keyfile", "--model-path", "keyword", "--port", "num_tokens", "monkey"])
def test_names_that_are_not_secrets(name: str) -> None:
    assert not secret_name(name)


def test_mask_argv() -> None:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "/m", "--api-key", "sk-OTHER-0123",
            "--hf-token=hf_abc", "--max-total-tokens", "4096", "--url", "https://bob:hunter2@example.com/x"]
    assert mask_argv(argv) == ("python3 -m sglang.launch_server --model-path /m --api-key *** --hf-token=*** "
                               "--max-total-tokens 4096 --url https://bob:***@example.com/x")
    assert mask_argv(["env", "HF_TOKEN=hf_abc", "PATH=/bin", "serve"]) == "env HF_TOKEN=*** PATH=/bin serve"
    assert mask_argv(["serve", "--token", "--port", "1"]) == "serve --token --port 1"  # a flag, not a value


def test_mask_argv_finds_what_a_review_slipped_past_it() -> None:
    assert mask_argv(["vllm", "--api-key", "-Zk3abc", "--port", "1"]) == "vllm --api-key *** --port 1"
    assert mask_argv(["curl", "-H", "Authorization: Bearer sk-1", "https://h/x?token=abc&n=2"]) == \
        "curl -H Authorization: *** https://h/x?token=***&n=2"
    assert mask_argv(["sh", "-c", "vllm serve m --api-key sk-123 --port 8000"]) == \
        "sh -c 'vllm serve m --api-key *** --port 8000'"


def test_a_co_tenant_s_command_line_is_described_with_its_key_masked() -> None:
    """A real process, read back from /proc as the gates read it."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "--api-key",
                              "sk-OTHERUSER-secret-0123456789", "--port", "8000"])
    try:
        for _ in range(100):  # until the child has exec'd python (its argv is the parent's before that)
            info = describe(child.pid)
            if "--api-key" in (info["cmdline"] or ""):
                break
            time.sleep(0.02)
        assert info["cmdline"] is not None and info["cmdline"].endswith("--api-key *** --port 8000"), info
        assert "OTHERUSER" not in info["cmdline"]
    finally:
        child.kill()
        child.wait()
