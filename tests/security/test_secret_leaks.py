"""No secret reaches a bundle, a log or kit's output, whatever a server does with it (review 21): a real ``kit run``
of a leaky server (tests/support/leaky_server.py) that echoes the load's ``header_env`` Authorization in 401 bodies
and SSE error events, and a ``pass_env`` value in 500 bodies, Prometheus labels, /server_info and a 2 MiB log line
(where kit's old log pump cut it in two); and a server that floods its log past ``server.log_limit_mb``.

Every file under the output folder and kit's stdout and stderr are searched for each secret in its raw, JSON-escaped,
base64 and URL-encoded forms and for every 10 characters of it in a row (a prefix or a piece left by a cut)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from support import leaky_server
from support.manifests import ab_arms, manifest_data, write_manifest

ROOT = Path(__file__).resolve().parents[2]
SERVER = str(ROOT / "tests" / "support" / "leaky_server.py")
TOKEN = "Bearer sk-Zq8/To+ken<Secret>Yj3Uv1KpMc"  # load.request.header_env (an Authorization header's value)
PASS = "hf_Qz7/Pa+ss<Secret>Xk9Vw2LmNb"  # server.pass_env
WINDOW = 10

pytestmark = pytest.mark.slow  # a real kit run of a real server, seconds each: the slow tier


def needles(secret: str) -> set[bytes]:
    """The secret's forms, and every WINDOW characters of it (and of its credentials after the scheme)."""
    raw = secret.encode()
    forms = {secret, json.dumps(secret)[1:-1], leaky_server.escaped(secret), leaky_server.escaped(secret, upper=True),
             quote(secret, safe=""), quote_plus(secret), base64.b64encode(raw).decode(),
             base64.urlsafe_b64encode(raw).decode().rstrip("=")}
    out = {f.encode() for f in forms}
    for part in (secret, secret.split(" ", 1)[-1]):
        out |= {part[i:i + WINDOW].encode() for i in range(len(part) - WINDOW + 1)}
    return out


def kit_run(tmp_path: Path, port: int, modes: str, *, server: dict[str, object] | None = None,
            request: dict[str, object] | None = None, requests: int = 6) -> tuple[subprocess.CompletedProcess[str], Path]:
    m = write_manifest(tmp_path / "m.yaml", manifest_data(
        "leaky", port=port, served_name="leaky", arms=ab_arms(same=True),
        command=["{python}", SERVER, "--host", "{host}", "--port", "{port}", "--modes", modes,
                 "--secret-env", "MY_PASS_SECRET"],
        server={"ready_timeout_s": 60, "stop_grace_s": 5, **(server or {})},
        load={"levels": [1], "requests_per_level": requests, "warmup_requests": 1, "prompt_tokens": 4,
              "output_tokens": 4, "request_timeout_s": 20, **({"request": request} if request else {})},
        design={"repeats": 1}, gates={"port_deadline_s": 5},
    ))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "MY_SECRET_TOKEN": TOKEN, "MY_PASS_SECRET": PASS,
           "PYTHONPATH": str(ROOT)}
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "kit", "run", str(m), "--out", str(out), "--allow-unsigned"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    return r, bundle


def assert_nowhere(secret: str, r: subprocess.CompletedProcess[str], out: Path) -> None:
    found = [("stdout/stderr", n) for n in needles(secret) if n in (r.stdout + r.stderr).encode()]
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) > 10
    for p in files:
        data = p.read_bytes()
        found += [(str(p.relative_to(out)), n) for n in needles(secret) if n in data]
    assert not found, found[:10]


def text_of(bundle: Path, pattern: str) -> str:
    return "".join(p.read_text() for p in sorted(bundle.glob(pattern)))


def test_an_authorization_header_quoted_in_401_bodies_is_masked(tmp_path: Path, port: int) -> None:
    """Every request is answered 401 quoting the header: the warm-up fails and with it every cell, whose reason,
    run.json, summary.json, report.md and the Error line quote the body; server.log holds what the server printed."""
    r, bundle = kit_run(tmp_path, port, "echo401", request={"header_env": {"Authorization": "MY_SECRET_TOKEN"}})
    assert r.returncode == 8, r.stdout + r.stderr
    assert_nowhere(TOKEN, r, tmp_path / "out")
    assert "invalid api key ***" in r.stderr and "invalid api key ***" in text_of(bundle, "cells/*/cell.json")
    assert "request with Authorization: *** (***)" in text_of(bundle, "cells/*/server.log")


def test_an_authorization_header_quoted_in_sse_error_events_is_masked(tmp_path: Path, port: int) -> None:
    """Odd requests end in an SSE error event quoting the credentials JSON-escaped (\\/ and \\u003C): each one's
    record, client.json's first error and summary.json quote it."""
    r, bundle = kit_run(tmp_path, port, "echoevent", request={"header_env": {"Authorization": "MY_SECRET_TOKEN"}})
    assert r.returncode == 0, r.stdout + r.stderr
    assert_nowhere(TOKEN, r, tmp_path / "out")
    records = text_of(bundle, "cells/*/level-1/records.jsonl")
    assert records.count("error event: key *** rejected") == 6  # 3 odd requests in each of 2 cells
    assert "rejecting ***" in text_of(bundle, "cells/*/server.log")


def test_a_pass_env_value_in_error_bodies_metrics_server_info_and_a_long_log_line_is_masked(
        tmp_path: Path, port: int) -> None:
    """Odd requests get 500 quoting the value; /metrics carries it as a label; /server_info in a command line; the log
    holds it in a 2 MiB line where the old pump cut the line (and the secret) at 1 MiB, and JSON-escaped."""
    r, bundle = kit_run(tmp_path, port, "passleak", server={"pass_env": ["MY_PASS_SECRET"], "info_path": "/server_info"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert_nowhere(PASS, r, tmp_path / "out")
    assert text_of(bundle, "cells/*/level-1/records.jsonl").count("internal error, env token=***") == 6
    assert 'kit_engine_requests_running{token=\\"***\\"}' in text_of(bundle, "cells/*/level-1/telemetry.jsonl")
    assert 'other_family{token=\\"***\\"}' in text_of(bundle, "cells/*/level-1/server_metrics.json")
    assert "serve --model m --auth ***" in text_of(bundle, "cells/*/server_info.json")
    for log in bundle.glob("cells/*/server.log"):
        lines = log.read_text().splitlines()
        long = next(line for line in lines if line.startswith("zzz"))
        # one line, masked where the secret was, nothing else changed
        assert long == "z" * leaky_server.SPLIT_AT + "***" + "z" * (leaky_server.LONG_LINE - leaky_server.SPLIT_AT)
        assert "plain line with the secret *** and escaped ***" in lines


def test_a_flooded_server_log_is_bounded_and_the_cut_recorded(tmp_path: Path, port: int) -> None:
    """6 MiB at start and 512 KiB before each answer, against server.log_limit_mb 1: each log keeps its start and its
    end within 1 MiB, one line says how much was left out (and cell.json's stop), the pipe is drained all along (every
    request is answered in time), and the secret the server prints in the tail is masked there too."""
    r, bundle = kit_run(tmp_path, port, "flood", server={"pass_env": ["MY_PASS_SECRET"], "log_limit_mb": 1},
                        requests=8)
    assert r.returncode == 0, r.stdout + r.stderr
    assert_nowhere(PASS, r, tmp_path / "out")
    cells = sorted(bundle.glob("cells/*/cell.json"))
    assert len(cells) == 2
    for cell_json in cells:
        cell = json.loads(cell_json.read_text())
        assert cell["status"] == "ok" and cell["levels"]["1"]["ok"] == 8 and cell["levels"]["1"]["errors"] == 0
        log = cell_json.with_name("server.log")
        data = log.read_bytes()
        assert len(data) <= (1 << 20) + 512, len(data)  # the limit, and the marker line
        assert cell["stop"]["log_bytes"] == len(data)
        dropped = cell["stop"]["log_dropped_bytes"]
        assert dropped > 8 << 20  # 6 MiB at start, 512 KiB per request (9 with the warm-up)
        assert data.startswith(b"leaky server starting")
        marker = f"[kit: {dropped} bytes of the server's output left out here".encode()
        assert data.count(marker) == 1
        tail = data[data.index(marker):]
        assert b"request w0-7 done ***\n" in tail  # the last request's line, in the tail
        assert sum(1 for _ in cell_json.with_name("level-1").joinpath("records.jsonl").open()) == 8
