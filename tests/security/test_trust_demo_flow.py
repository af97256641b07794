"""Issue 9, end to end: the `make demo` flow on a clean machine (fresh config), with the real engine.

`kit run --trust FILE` approves the signed manifest through the file given explicitly; the runner key made on
first use is added to the user's policy for kit-bundle only, so `kit verify BUNDLE` exits 0 on the same
machine (with or without `--trust FILE`, which adds to that policy; `--trust-only FILE` replaces it and the
runner is no longer trusted), and 9 once the bundle is re-signed by another key (even with the same key
comment)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.manifests import ab_arms, manifest_data, write_manifest
from trust_helpers import ROOT, key, resign

from kit.bundle import Bundle

pytestmark = pytest.mark.slow


def _kit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=ROOT, check=False)


def test_run_then_verify_on_the_same_machine_and_not_after_resigning(tmp_path: Path, port: int) -> None:
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    m = write_manifest(tmp_path / "tiny.yaml", manifest_data(
        "tiny", port=port, arms=ab_arms(), server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": 4, "warmup_requests": 0, "prompt_tokens": 8, "output_tokens": 4,
              "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1}, gates={"port_deadline_s": 5}))
    approver = key(tmp_path, "approver", "researcher@lab")
    policy = tmp_path / "project_signers"
    policy.write_text(f'researcher@lab namespaces="kit-manifest" {approver.public_line()}\n')
    assert _kit(env, "sign", str(m), "--key", str(approver.path)).returncode == 0
    out = tmp_path / "results"
    r = _kit(env, "run", "--trust", str(policy), str(m), "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    said = "".join((r.stdout + r.stderr).split())  # the notice is wrapped to the terminal's width
    assert said.count("trusteditforkit-bundleonly") == 1, r.stderr
    b = next(p for p in out.iterdir() if p.is_dir())
    v = _kit(env, "verify", str(b))
    assert v.returncode == 0, v.stdout + v.stderr
    assert v.stdout.startswith(f"ok: {b}: TRUSTED: signed by SHA256:"), v.stdout
    assert "manifest approval (kit-manifest): NOT trusted under your policy" in v.stdout  # not in the user's file
    v = _kit(env, "verify", "--trust", str(policy), str(b))  # --trust adds to the user's file (the runner's)
    assert v.returncode == 0 and "manifest approval (kit-manifest): signed by" in v.stdout, v.stdout
    v = _kit(env, "verify", "--trust-only", str(policy), str(b))  # --trust-only replaces it: runner not in it
    assert v.returncode == 9 and "UNTRUSTED" in v.stderr.splitlines()[0], v.stderr

    runner_comment = (tmp_path / "config" / "kit" / "runner_ed25519.pub").read_text().split()[2]
    resign(Bundle.open(b), key(tmp_path, "other", runner_comment))
    v = _kit(env, "verify", str(b))
    assert v.returncode == 9, v.stdout + v.stderr
    assert v.stderr.startswith(f"Error: UNTRUSTED: bundle {b} is signed by SHA256:"), v.stderr
    assert f"(key comment '{runner_comment}': self-declared, not proof of identity)" in v.stderr.splitlines()[0]
