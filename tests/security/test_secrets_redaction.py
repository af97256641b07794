"""Secrets never land in a bundle: the process-runtime server gets a minimal environment (kit's own and
other variables never pass), and pass_env values are redacted in their raw, base64 (standard and urlsafe,
padded or not), URL-encoded (quote, quote_plus) and JSON-escaped forms, in every file kit writes."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
from support.manifests import ENGINE_ARGS, manifest_data, write_manifest

from kit.runtime import ServerSpec, base_environment

ROOT = Path(__file__).resolve().parents[2]
PASS_SECRET = "hf_Sup3r/secret+value=with space&more"  # pass_env: the server may see it, no file may hold it
PLANTED = "planted-kit-env-secret-5d1e"  # in kit's environment only: the server must never see it


def forms(s: str) -> set[str]:
    raw = s.encode()
    b64 = {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    return {s, quote(s, safe=""), quote(s), quote_plus(s), json.dumps(s)[1:-1], *b64, *(b.rstrip("=") for b in b64),
            raw.hex(), raw.hex().upper()}


ECHO = """
import base64, json, os, sys, urllib.parse as u
s = os.environ.get("HF_TOKEN", "")
print("raw", s, "b64", base64.b64encode(s.encode()).decode(), flush=True)
print("urlsafe", base64.urlsafe_b64encode(s.encode()).decode().rstrip("="), "quote", u.quote(s, safe=""), flush=True)
print("quote_plus", u.quote_plus(s), "json", json.dumps({"t": s}), flush=True)
print("hex", s.encode().hex(), "HEX", s.encode().hex().upper(), flush=True)  # a review: a dump of bytes
print("embedded-b64", base64.b64encode(b"user:" + s.encode()).decode(), flush=True)
print("planted", os.environ.get("KIT_PLANTED_SECRET"), os.environ.get("MY_PLANTED_SECRET"), flush=True)
print("env-names", " ".join(sorted(os.environ)), flush=True)
os.execv(sys.executable, [sys.executable, "-m", "kit.engine", *sys.argv[1:]])
"""


def test_redact_covers_encoded_forms() -> None:
    spec = ServerSpec(name="t", arm="a", command=["x"], env={}, secret_env={"HF_TOKEN": PASS_SECRET},
                      host="127.0.0.1", port=1, readiness_path="/", ready_timeout_s=1, stop_grace_s=1,
                      log_path=Path(os.devnull), labels={})
    lower_hex = re.sub(r"%[0-9A-F]{2}", lambda mo: mo.group(0).lower(), quote(PASS_SECRET, safe=""))
    for f in forms(PASS_SECRET) | {lower_hex}:
        out = spec.redact(f"before {f} after")
        assert out == "before *** after", (f, out)
    for prefix in (b"user:", b"u:", b"ab:"):  # inside longer base64 text, at every byte alignment
        inner = spec.redact(base64.b64encode(prefix + PASS_SECRET.encode()).decode())
        assert "***" in inner and len(inner.replace("***", "")) <= 10, inner


def test_base_environment_keeps_only_the_minimal_names() -> None:
    env = {"PATH": "/bin", "HOME": "/h", "LANG": "C", "LC_ALL": "C", "TMPDIR": "/t", "TZ": "UTC", "USER": "u",
           "KIT_KEY_PASSPHRASE": "x", "KIT_PLANTED_SECRET": "x", "AWS_SECRET_ACCESS_KEY": "x", "SSH_AUTH_SOCK": "/s",
           "LD_PRELOAD": "/x.so", "PYTHONPATH": "/p"}
    assert sorted(base_environment(env)) == ["HOME", "LANG", "LC_ALL", "PATH", "TMPDIR", "TZ", "USER"]


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_no_secret_anywhere_in_a_real_bundle(tmp_path: Path, port: int) -> None:
    m = write_manifest(tmp_path / "m.yaml", manifest_data(
        "secrets", port=port,
        command=["{python}", "-c", ECHO, "--host", "{host}", "--port", "{port}", "--served-name", "{served_name}",
                 *ENGINE_ARGS],
        server={"pass_env": ["HF_TOKEN"], "ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": 2, "warmup_requests": 0, "prompt_tokens": 4, "output_tokens": 4},
        design={"repeats": 1}, gates={"port_deadline_s": 5},
    ))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "HF_TOKEN": PASS_SECRET,
           "KIT_PLANTED_SECRET": PLANTED, "MY_PLANTED_SECRET": PLANTED}
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "-m", "kit", "run", str(m), "--out", str(out), "--allow-unsigned"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (bundle,) = [p for p in out.iterdir() if p.is_dir()]
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert len(files) > 10
    needles = {f.encode() for f in forms(PASS_SECRET) | forms(PLANTED)}
    for p in files:
        data = p.read_bytes()
        found = [n for n in needles if n in data]
        assert not found, f"{p.relative_to(bundle)} holds {found}"
    log = next(p for p in files if p.name == "server.log").read_text()
    assert "raw *** b64 ***" in log and "urlsafe *** quote ***" in log and "quote_plus *** json" in log and "hex *** HEX ***" in log
    assert "planted None None" in log  # neither planted variable reached the server
    names = next(line for line in log.splitlines() if line.startswith("env-names")).split()[1:]
    # of kit's own variables only the server's tag (kit.plumbing.procs.TAG_VAR: a token, to find what it starts)
    assert [n for n in names if n.startswith("KIT_")] == ["KIT_SERVER_TAG"] and "MY_PLANTED_SECRET" not in names
    assert "HF_TOKEN" in names and "PYTHONUNBUFFERED" in names
    server = json.loads(next(p for p in files if p.name == "server.json").read_text())
    assert set(server["inherited_env_names"]) <= {"PATH", "HOME", "LANG", "TMPDIR", "TZ", "USER"} | {
        n for n in server["inherited_env_names"] if n.startswith("LC_")}
    assert "KIT_KEY_PASSPHRASE" not in json.dumps(server) and server["secret_env_names"] == ["HF_TOKEN"]
