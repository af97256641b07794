"""A small, fake-but-real bundle for the bundle tests: real files, real keys, real signatures, and records that
the real ``kit.stats`` summarizes (so ``kit verify`` recomputes summary.json for real)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.bundle import Bundle, sign_provenance
from kit.signing import SigningKey
from kit.stats import summarize_bundle
from tests.stats.synth import client_report

ARMS = ("base", "oea")
LEVELS = (1, 4)
REQUESTS = 6
MANIFEST = f"""manifest_version: 1
name: demo
runtime: process
model:
  served_name: kit-moe
server:
  command: ["{{python}}", "-m", "kit.engine", "--host", "{{host}}", "--port", "{{port}}"]
  port: 18080
arms:
  - name: base
  - name: oea
    args: ["--oea-k0", "4"]
load:
  levels: {list(LEVELS)}
  requests_per_level: {REQUESTS}
  warmup_requests: 0
  output_tokens: 4
  seed: 7
design:
  repeats: 1
analysis:
  resamples: 200
"""


def _records(arm: str, level: int) -> list[dict[str, Any]]:
    out = []
    for i in range(REQUESTS):
        ok = i % 5 != 4
        ttft = (10_000 + 250 * i + 1000 * level + (500 if arm == "oea" else 0)) * 1000
        chunks = [ttft + k * 4_000_000 for k in range(4)] if ok else []
        out.append({"arm": arm, "repeat": 1, "level": level, "rid": f"w0-{i}", "worker": 0,
                    "t_start_ns": 1_000_000 * i, "wall_start": 1_700_000_000.0 + 0.05 * i,
                    "ttft_ns": ttft if ok else None, "chunk_ns": chunks, "e2e_ns": (chunks[-1] if ok else 0) + 300_000,
                    "usage_completion_tokens": 4 if ok else None, "usage_prompt_tokens": 32 if ok else None,
                    "client_tokens": len(chunks), "status": 200 if ok else 500,
                    "error": None if ok else "http 500: boom"})
    return out


def fill_cell(b: Bundle, cell_id: str, arm: str) -> None:
    b.cell_dir(cell_id)
    b.write_json(f"cells/{cell_id}/cell.json", {"id": cell_id, "arm": arm, "status": "ok"})
    b.write_bytes(f"cells/{cell_id}/server.log", f"starting {arm}\nready\nstopping\n".encode())
    b.append_jsonl(f"cells/{cell_id}/gates.jsonl", {"phase": "before", "ok": True})
    b.append_jsonl(f"cells/{cell_id}/gates.jsonl", {"phase": "after", "ok": True})
    b.write_json(f"cells/{cell_id}/command.json", {"argv": ["python", "-m", "kit.engine", "--arm", arm]})
    for lv in LEVELS:
        records = _records(arm, lv)
        b.write_bytes(f"cells/{cell_id}/level-{lv}/records.jsonl",
                      "".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode())
        b.write_json(f"cells/{cell_id}/level-{lv}/client.json", client_report(records, lv, bound=False))
        b.write_json(f"cells/{cell_id}/level-{lv}/server_metrics.json", {"before": None, "after": None})


def build_bundle(results: Path, key: SigningKey, *, experiment: str = "demo", sign: bool = True) -> Bundle:
    b = Bundle.create(results, experiment)
    b.write_bytes("manifest.yaml", MANIFEST.encode())
    b.write_bytes("manifest.yaml.sig", b'{"payloadType": "application/vnd.in-toto+json"}\n')
    b.write_json("run.json", {"run_id": b.run_id, "experiment": experiment, "kit_version": "0.1.0",
                              "status": "complete", "started": "2025-01-01T00:00:00Z",
                              "finished": "2025-01-01T00:10:00Z", "argv": ["kit", "run", "m.yaml"],
                              "flags": {"allow_unsigned": False, "allow_unpinned": False}})
    b.write_json("plan.json", {"order": "interleaved",
                               "cells": [{"index": i, "arm": a, "repeat": 1, "id": f"{a}-r1"} for i, a in enumerate(ARMS)],
                               "levels": [{"concurrency": c, "requests": REQUESTS, "warmup": 0} for c in LEVELS]})
    b.write_json("environment.json", {"host": {"name": "test"}, "gpus": []})
    fill_cell(b, "oea-r1", "oea")  # a first attempt that failed and was moved aside on resume
    b.move_failed_attempt("oea-r1")
    for arm in ARMS:
        fill_cell(b, f"{arm}-r1", arm)
    b.write_json("summary.json", summarize_bundle(b.root))
    b.write_bytes("report.md", "# demo\n\nbase vs oea: µ-benchmark ✓\n".encode())
    b.write_bytes("plots/ttft.png", bytes(range(256)) * 2)
    b.write_bytes("notes/ünïcode name.txt", b"non-ASCII path\n")
    if sign:
        sign_provenance(b, key, predicate={
            "externalParameters": {"flags": {"allow_unsigned": False}},
            "internalParameters": {"kit": "0.1.0", "runtime": "process", "hardware": {"gpus": 0}},
            "resolvedDependencies": [],
            "metadata": {"startedOn": "2025-01-01T00:00:00Z", "finishedOn": "2025-01-01T00:10:00Z"},
        })
    return b
