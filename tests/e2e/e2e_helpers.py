"""Helpers for the end-to-end tests: a small engine manifest, running the kit CLI, reading bundles."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from support.manifests import ab_arms, manifest_data, write_manifest

ROOT = Path(__file__).resolve().parents[2]


def tiny_manifest(path: Path, port: int, *, name: str = "tiny", levels: tuple[int, ...] = (1, 4),
                  requests: int = 16, output_tokens: int = 8, repeats: int = 2, same_arms: bool = False,
                  order: str = "interleaved", prompt_tokens: int = 8, gpus: str | None = None) -> Path:
    """A small engine experiment (a few seconds per cell) written as a manifest file."""
    return write_manifest(path, manifest_data(
        name, port=port, arms=ab_arms(same=same_arms),
        hardware={"gpus": gpus} if gpus else None,
        server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": list(levels), "requests_per_level": requests, "warmup_requests": 2,
              "prompt_tokens": prompt_tokens, "output_tokens": output_tokens, "seed": 3, "request_timeout_s": 60},
        design={"repeats": repeats, "order": order},
        gates={"port_deadline_s": 5},
    ))


def one_level_manifest(path: Path, port: int, *, name: str, repeats: int) -> Path:
    """A run of a few seconds a cell: one level of 6 requests at c=1 (a run to interrupt, or to cut the output of)."""
    return write_manifest(path, manifest_data(
        name, port=port, server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": 6, "warmup_requests": 1, "prompt_tokens": 8, "output_tokens": 8,
              "seed": 3, "request_timeout_s": 60},
        design={"repeats": repeats}, gates={"port_deadline_s": 5}))


def kit(*args: str, env: dict[str, str] | None = None, timeout: float = 300,
        prefix: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prefix or []), sys.executable, "-m", "kit", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT, check=False)


_LOOPBACK_UP = ["sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


@functools.cache
def own_network() -> list[str]:
    """A command prefix that runs a command in a network namespace of its own (loopback up), or [] where the
    kernel or the permissions do not allow one.

    For runs of a manifest with a fixed port (the shipped demo's 18080): in their own namespace no other
    process on the machine (another `make demo`, another test session) can hold that port."""
    for unshare in (["unshare", "--net", "--"], ["unshare", "--user", "--map-root-user", "--net", "--"]):
        try:
            ok = subprocess.run([*unshare, *_LOOPBACK_UP, "true"], capture_output=True, timeout=30,
                                check=False).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        if ok:
            return [*unshare, *_LOOPBACK_UP]
    return []


def bundle_of(out: Path) -> Path:
    bundles = [p for p in out.iterdir() if p.is_dir()]
    assert len(bundles) == 1, bundles
    return bundles[0]


def read_json(p: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(p.read_text())
