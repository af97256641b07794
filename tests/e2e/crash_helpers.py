"""Helpers for the crash tests: a run of the real engine killed like the OOM killer kills, and what must hold
after its resume, read without kit's own code (hashes, the checkpoints' DSSE signatures checked with
``cryptography`` over the PAE bytes, /proc)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_ssh_public_key
from e2e_helpers import ROOT
from support.manifests import manifest_data, write_manifest

CELLS = ["baseline-r1", "oea-r1", "oea1-r1"]


def crash_manifest(path: Path, port: int) -> Path:
    """Three short cells (three arms of the engine, one repeat, one level of 3 requests): 3-5 s a cell."""
    arms = [{"name": "baseline"}, {"name": "oea", "args": ["--oea-k0", "2"]}, {"name": "oea1", "args": ["--oea-k0", "1"]}]
    return write_manifest(path, manifest_data(
        "crash", port=port, arms=arms, server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": 3, "warmup_requests": 1, "prompt_tokens": 8,
              "output_tokens": 4, "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1, "order": "interleaved"}, gates={"port_deadline_s": 5}))


def start_kit(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "kit", *args], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, **env}, cwd=ROOT)


def files_of(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (relative POSIX path -> bytes)."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _pae(payload_type: str, body: bytes) -> bytes:
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def signed_checkpoints(root: Path) -> list[dict]:  # type: ignore[type-arg]
    """The statements of checkpoints/000000.dsse.json, 000001, ... whose Ed25519 signature verifies (checked
    here with cryptography, over DSSE's PAE) and that link to the one before by the sha256 of its bytes."""
    out: list[dict] = []  # type: ignore[type-arg]
    previous = None
    for n in range(10_000):
        path = root / "checkpoints" / f"{n:06d}.dsse.json"
        if not path.exists():
            break
        data = path.read_bytes()
        env = json.loads(data)
        body = base64.b64decode(env["payload"])
        for s in env["signatures"]:
            key = load_ssh_public_key(s["publicKey"].encode())
            assert isinstance(key, Ed25519PublicKey)
            key.verify(base64.b64decode(s["sig"]), _pae(env["payloadType"], body))  # raises when it does not
        stmt = json.loads(body)
        link = stmt["predicate"]["previous"]
        assert (link["sha256"] if link else None) == previous, f"{path}: not linked to the one before"
        previous = hashlib.sha256(data).hexdigest()
        out.append(stmt)
    return out


def checkpointed_cells(root: Path) -> list[str]:
    """The cells a signed checkpoint says completed ok."""
    return [s["predicate"]["cell"] for s in signed_checkpoints(root)
            if s["predicate"]["kind"] == "cell" and s["predicate"]["status"] == "ok"]


def processes_with(env_entry: str | None = None, argv_part: str | None = None) -> list[int]:
    """PIDs whose environment holds ``env_entry`` (``NAME=value``) or whose command line holds ``argv_part``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            environ = (d / "environ").read_bytes().split(b"\0")
            argv = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if (env_entry is not None and env_entry.encode() in environ) or (argv_part is not None and argv_part in argv):
            found.append(int(d.name))
    return found


# an atomic write's temp file (``.<name>.tmp-<pid>-<8 hex>``), cut off by the kill: never a file of the bundle
TEMP = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")


def kept_as_measured(before: dict[str, bytes], after: dict[str, bytes], completed: list[str]) -> list[str]:
    """Problems: a file of a cell completed before the kill that is not byte for byte where it was; a file of a
    partial cell whose bytes at the kill are not kept (its attempt moved to failed/<id>-a<n>/)."""
    problems = []
    for rel, data in before.items():
        parts = rel.split("/")
        if parts[0] != "cells" or TEMP.match(parts[-1]):
            continue
        if parts[1] in completed:
            if after.get(rel) != data:
                problems.append(f"{rel}: changed or gone although its cell was checkpointed before the kill")
            continue
        tail = "/".join(parts[2:])
        moved = [r for r in after if r.startswith(f"failed/{parts[1]}-a") and r.split("/", 2)[2] == tail]
        if not any(after[r].startswith(data) for r in moved):
            problems.append(f"{rel}: a partial cell's file, not kept under failed/{parts[1]}-a<n>/")
    for cid in completed:
        extra = [r for r in after if r.startswith(f"cells/{cid}/") and r not in before]
        problems += [f"{r}: added to a cell completed before the kill" for r in extra]
    return problems
