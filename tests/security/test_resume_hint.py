"""The resume command kit prints after an interrupt works when pasted (issue 21): a real run of the small
engine, approved through a `--trust FILE` (or `--trust-only FILE`) policy on a clean machine, SIGINT mid-level,
then exactly the printed command, run by a shell. Before, `--trust FILE` replaced the user's own policy, so the
printed `kit run --resume BUNDLE` either lost the manifest's approver (no --trust) or, given it, lost the
runner key kit keeps in ~/.config/kit/allowed_signers, and was refused."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.manifests import ab_arms, manifest_data, write_manifest
from support.pasted import pasted
from support.terminal import popen_as_from_a_terminal
from trust_helpers import ROOT, key

from kit.plumbing.poll import poll_until

pytestmark = pytest.mark.slow


def _env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "COLUMNS": "4000"}


def _kit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=ROOT, check=False)


def _signed_manifest(tmp_path: Path, port: int) -> tuple[Path, Path]:
    """A small A/B manifest signed by an approver whom only the returned policy file names (kit-manifest)."""
    m = write_manifest(tmp_path / "tiny.yaml", manifest_data(
        "hint", port=port, arms=ab_arms(), server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [2], "requests_per_level": 40, "warmup_requests": 0, "prompt_tokens": 8,
              "output_tokens": 24, "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1}, gates={"port_deadline_s": 5}))
    approver = key(tmp_path, "approver", "researcher@lab")
    policy = tmp_path / "project signers"  # a space: the printed command must quote it
    policy.write_text(f'researcher@lab namespaces="kit-manifest" {approver.public_line()}\n')
    assert _kit(_env(tmp_path), "sign", str(m), "--key", str(approver.path)).returncode == 0
    return m, policy


def _interrupted(tmp_path: Path, args: list[str], out: Path) -> tuple[str, Path]:
    """``kit ARGS`` SIGINTed once the first level records into a bundle under ``out``; kit's stderr, the bundle."""
    env = _env(tmp_path)
    proc = popen_as_from_a_terminal([sys.executable, "-m", "kit", *args], cwd=ROOT, env={**os.environ, **env},
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def recording() -> bool:
            if proc.poll() is not None:
                raise AssertionError(f"kit ended ({proc.returncode}) first: {proc.communicate()}")
            return any(len(f.read_text().splitlines()) >= 3 for f in out.glob("*/cells/*/level-2/records.jsonl"))

        assert poll_until(recording, 180, interval=0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    [b] = [p for p in out.iterdir() if p.is_dir()]
    return stderr, b


def _interrupted_run(tmp_path: Path, port: int, flag: str) -> tuple[str, Path]:
    """A signed manifest approved only through ``flag FILE``; SIGINT once the first level records; returns
    kit's stderr and the bundle."""
    m, policy = _signed_manifest(tmp_path, port)
    out = tmp_path / "results"
    return _interrupted(tmp_path, ["run", flag, str(policy), str(m), "--out", str(out)], out)


def _pasted(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` pasted into a shell elsewhere, `kit` being this checkout's kit."""
    return pasted(command, tmp_path / "bin", env={**_env(tmp_path), "PYTHONPATH": str(ROOT)}, cwd=tmp_path,
                  timeout=300)


def _printed_command(stderr: str, command: str = "kit run --resume") -> str:
    found = re.findall(rf"resumable: ({command} .*)$", stderr, flags=re.M)
    assert len(found) == 1, stderr
    return found[0].strip()


@pytest.mark.parametrize("flag", ["--trust", "--trust-only"])
def test_the_printed_resume_command_works_as_pasted(tmp_path: Path, port: int, flag: str) -> None:
    stderr, b = _interrupted_run(tmp_path, port, flag)
    command = _printed_command(stderr)
    assert "project signers" in command
    r = _pasted(tmp_path, command)
    assert r.returncode == 0, command + "\n" + r.stdout + r.stderr
    assert json.loads((b / "run.json").read_text())["status"] == "complete"
    v = _kit(_env(tmp_path), "verify", str(b))
    assert v.returncode == 0, v.stdout + v.stderr


def test_the_printed_reproduce_command_finishes_and_judges_the_reproduction(tmp_path: Path, port: int) -> None:
    """An interrupted `kit reproduce` prints `kit reproduce SOURCE --resume BUNDLE` with every flag that decided it
    (a --trust-only policy, --allow-untrusted-source: the source's runner is in no file of that policy); pasted
    elsewhere it finishes the new run and judges it (a verdict's exit code, reproduce.json written)."""
    m, policy = _signed_manifest(tmp_path, port)
    source = tmp_path / "source"
    first = _kit(_env(tmp_path), "run", "--trust-only", str(policy), str(m), "--out", str(source))
    assert first.returncode == 0, first.stdout + first.stderr
    [src] = [p for p in source.iterdir() if p.is_dir()]
    out = tmp_path / "again"
    stderr, b = _interrupted(tmp_path, ["reproduce", str(src), "--trust-only", str(policy),
                                        "--allow-untrusted-source", "--out", str(out)], out)
    command = _printed_command(stderr, "kit reproduce")
    assert command.startswith(f"kit reproduce {src} --resume {b} ") and "--allow-untrusted-source" in command, command
    # not sealed yet, it names its source from its start (kit.reproduce.resume): another source is refused with it
    assert (b / "source" / "provenance.dsse.json").read_bytes() == (src / "provenance.dsse.json").read_bytes()
    other = _kit(_env(tmp_path), "run", "--trust-only", str(policy), str(m), "--out", str(tmp_path / "other"))
    assert other.returncode == 0, other.stdout + other.stderr
    [osrc] = [p for p in (tmp_path / "other").iterdir() if p.is_dir()]
    wrong = _pasted(tmp_path, command.replace(f"kit reproduce {src} ", f"kit reproduce {osrc} ", 1))
    assert wrong.returncode == 2 and "--resume takes only the bundle" in wrong.stderr, wrong.stdout + wrong.stderr
    r = _pasted(tmp_path, command)
    assert r.returncode in (0, 10, 11), command + "\n" + r.stdout + r.stderr  # reproduced, inconsistent, imprecise
    assert json.loads((b / "run.json").read_text())["status"] == "complete"
    assert json.loads((b / "reproduce.json").read_text())["verdict"] in ("reproduced", "inconsistent", "imprecise")


def test_a_runner_key_the_policy_does_not_name_is_said_first_and_with_the_resume_command(tmp_path: Path,
                                                                                        port: int) -> None:
    """A review: `kit run --key K` of a key no policy names ran without a word; after Ctrl-C its printed resume
    command, pasted, was refused (exit 9 UNTRUSTED). kit now says so at the start and beside the command, with the
    line that trusts the key; once that line is added, the printed command works as pasted."""
    m, policy = _signed_manifest(tmp_path, port)
    other = key(tmp_path, "other-runner", "someone@lab")
    out = tmp_path / "results"
    stderr, b = _interrupted(tmp_path, ["run", "--trust", str(policy), "--key", str(other.path), str(m),
                                        "--out", str(out)], out)
    line = f'kit-runner namespaces="kit-bundle" {" ".join(other.public_line().split()[:2])}'
    warnings = [w for w in stderr.splitlines() if w.startswith("WARNING: the runner key is not trusted")]
    assert len(warnings) == 2 and all(w.endswith(line) for w in warnings), stderr  # at the start, and at the end
    assert re.search(rf"^First: the runner key is not trusted .*{re.escape(line)}$", stderr, flags=re.M), stderr
    command = _printed_command(stderr)
    assert _pasted(tmp_path, command).returncode in (2, 9)  # as the warning said (2: the file it names is missing)
    user = tmp_path / "config" / "kit" / "allowed_signers"  # none yet: this run made no key of its own
    user.parent.mkdir(parents=True, exist_ok=True)
    with user.open("a") as f:
        f.write(line + "\n")
    r = _pasted(tmp_path, command)
    assert r.returncode == 0, command + "\n" + r.stdout + r.stderr
    assert json.loads((b / "run.json").read_text())["status"] == "complete"
