"""Helpers for the end-to-end tests: a small engine manifest, running the kit CLI, reading bundles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tiny_manifest(path: Path, port: int, *, name: str = "tiny", levels: tuple[int, ...] = (1, 4),
                  requests: int = 16, output_tokens: int = 8, repeats: int = 2, same_arms: bool = False,
                  order: str = "interleaved", prompt_tokens: int = 8, gpus: str | None = None) -> Path:
    """A small engine experiment (a few seconds per cell) written as a manifest file."""
    oea_args = "" if same_arms else '\n    args: ["--oea-k0", "2"]'
    second = "a2" if same_arms else "oea"
    first = "a1" if same_arms else "baseline"
    text = f"""# yaml-language-server: $schema=../manifest.schema.json
manifest_version: 1
name: {name}
runtime: process{f"{chr(10)}hardware:{chr(10)}  gpus: {gpus}" if gpus else ""}
model:
  served_name: tiny-moe
server:
  command: ["{{python}}", "-m", "kit.engine", "--host", "{{host}}", "--port", "{{port}}", "--served-name",
            "{{served_name}}", "--experts", "16", "--top-k", "4", "--layers", "2", "--hidden", "64",
            "--expert-ffn", "128", "--vocab", "256"]
  port: {port}
  ready_timeout_s: 60
  stop_grace_s: 5
arms:
  - name: {first}
  - name: {second}{oea_args}
load:
  levels: [{", ".join(map(str, levels))}]
  requests_per_level: {requests}
  warmup_requests: 2
  prompt_tokens: {prompt_tokens}
  output_tokens: {output_tokens}
  seed: 3
  request_timeout_s: 60
design:
  repeats: {repeats}
  order: {order}
gates:
  port_deadline_s: 5
"""
    path.write_text(text)
    return path


def kit(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=ROOT, check=False)


def bundle_of(out: Path) -> Path:
    bundles = [p for p in out.iterdir() if p.is_dir()]
    assert len(bundles) == 1, bundles
    return bundles[0]


def read_json(p: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(p.read_text())
