"""One synthetic-bundle factory for every tier: real files laid out like a bundle of `kit run`.

``write_bundle`` writes plan, cells and levels (records, client.json, optional server metrics) through a
``write(relpath, bytes)`` callback; ``make_bundle`` puts them in a plain directory (the stats tests), and
``build_bundle`` into a real ``kit.bundle.Bundle`` with run, environment, summary, report, plots, a failed
attempt moved aside, and a real signature (the bundle tests).

Records are simulated by default: a closed-loop streaming load per cell and level; each arm has a latency
model, every cell (repeat) draws one random multiplier (the server lifetime's speed) and every cell x level a
smaller one (drift), so repeats differ the way real server restarts do. ``BundleSpec(toy_records=True)``
writes six small hand-made records per level instead, real in shape, small enough for byte-by-byte
tampering tests; the real ``kit.stats`` summarizes both kinds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kit.bundle import Bundle, sign_provenance
from kit.signing import SigningKey
from kit.stats import summarize_bundle

ROOT = Path(__file__).resolve().parents[2]
DEMO_MANIFEST = ROOT / "experiments" / "demo-levels.yaml"
LEVELS = (1, 4, 16, 64)
LAYERS = 4

Write = Callable[[str, bytes], None]


@dataclass(frozen=True)
class ArmModel:
    """Latency model of one arm; multipliers apply to the baseline model's figures."""

    ttft_factor: float = 1.0
    itl_factor: float = 1.0
    experts_factor: float = 1.0


@dataclass
class BundleSpec:
    arms: Mapping[str, ArmModel] = field(default_factory=lambda: {"baseline": ArmModel(), "oea": ArmModel()})
    repeats: int = 3
    levels: tuple[int, ...] = LEVELS
    requests: int = 64
    tokens: int = 32
    cell_sd: float = 0.03  # log-sd of the per-cell multiplier (between repeats)
    cell_level_sd: float = 0.01  # log-sd of the per cell x level multiplier
    seed: int = 0
    failed: Mapping[str, str] = field(default_factory=dict)  # cell id -> reason
    client_bound: frozenset[tuple[str, int]] = frozenset()  # (cell id, level)
    server_metrics: bool = False
    errors_per_level: int = 0  # failed requests per cell x level (status 500)
    toy_records: bool = False  # six small hand-made records per level instead of simulated ones
    analysis: str = ""  # extra lines of the manifest's analysis section, e.g. "  method: welch\n"


def base_ttft_ms(level: int) -> float:
    return 15.0 + 1.5 * level


def base_itl_ms(level: int) -> float:
    return 4.0 * (1.0 + level / 32.0)


def _request(rng: np.random.Generator, level: int, model: ArmModel, mult: float, tokens: int) -> dict[str, Any]:
    ttft = base_ttft_ms(level) * model.ttft_factor * mult * rng.lognormal(0.0, 0.25)
    per_req = rng.lognormal(0.0, 0.08)
    gaps = base_itl_ms(level) * model.itl_factor * mult * per_req * rng.gamma(8.0, 1 / 8.0, size=tokens - 1)
    chunks_ms = ttft + np.concatenate([[0.0], np.cumsum(gaps)])
    chunk_ns = [round(float(c) * 1e6) for c in chunks_ms]
    e2e_ns = chunk_ns[-1] + int(rng.integers(100_000, 400_000))
    return {"ttft_ns": chunk_ns[0], "chunk_ns": chunk_ns, "e2e_ns": e2e_ns, "usage_completion_tokens": tokens,
            "usage_prompt_tokens": 32, "client_tokens": tokens, "status": 200, "error": None}


def _level_records(rng: np.random.Generator, arm: str, repeat: int, level: int, model: ArmModel, mult: float,
                   spec: BundleSpec, t0: float) -> list[dict[str, Any]]:
    clocks = [t0 + 0.001 * w for w in range(level)]  # closed loop: one clock per virtual user
    out = []
    for i in range(spec.requests + spec.errors_per_level):
        w = min(range(level), key=lambda k: clocks[k])
        rec: dict[str, Any]
        if i < spec.errors_per_level:
            rec = {"ttft_ns": None, "chunk_ns": [], "e2e_ns": 2_000_000, "usage_completion_tokens": None,
                   "usage_prompt_tokens": None, "client_tokens": 0, "status": 500, "error": "http 500: boom"}
        else:
            rec = _request(rng, level, model, mult, spec.tokens)
        full = {"arm": arm, "repeat": repeat, "level": level, "rid": f"{arm}-{repeat}-{level}-{i}", "worker": 0,
                "t_start_ns": int(clocks[w] * 1e9), "wall_start": round(clocks[w], 6), **rec}
        clocks[w] += rec["e2e_ns"] / 1e9 + 0.0002
        out.append(full)
    return out


def _server_metrics(rng: np.random.Generator, level: int, model: ArmModel, requests: int,
                    tokens: int) -> dict[str, Any]:
    steps = requests * tokens / level
    before: dict[str, float] = {}
    after: dict[str, float] = {}
    for layer in range(LAYERS):
        per_step = min(64.0, 8.0 * level ** 0.6) * model.experts_factor * rng.lognormal(0, 0.01)
        for name, b, a in (("sum", 1000.0, 1000.0 + per_step * steps), ("count", 100.0, 100.0 + steps)):
            key = f'kit_engine_unique_experts_{name}{{layer="{layer}"}}'
            before[key], after[key] = b, a
    before["kit_engine_step_seconds_sum"], after["kit_engine_step_seconds_sum"] = 1.0, 1.0 + steps * 0.004
    before["kit_engine_step_seconds_count"], after["kit_engine_step_seconds_count"] = 100.0, 100.0 + steps
    before["kit_engine_batch_size_sum"], after["kit_engine_batch_size_sum"] = 50.0, 50.0 + steps * level
    before["kit_engine_batch_size_count"], after["kit_engine_batch_size_count"] = 100.0, 100.0 + steps
    return {"before": before, "after": after}


def _json(data: Any) -> bytes:
    return (json.dumps(data, indent=1, sort_keys=True) + "\n").encode()


def _toy_records(arm: str, level: int) -> list[dict[str, Any]]:
    """Six small records per level, real in shape (``kit.stats`` summarizes them), every fifth one an error."""
    out = []
    for i in range(TOY_REQUESTS):
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


def client_report(records: list[dict[str, Any]], level: int, *, bound: bool) -> dict[str, Any]:
    """A client.json shaped like the one kit.load writes (one driver process)."""
    ok = [r for r in records if r["status"] == 200]
    tokens = sum(r["client_tokens"] for r in ok)
    wall = max(r["wall_start"] + r["e2e_ns"] / 1e9 for r in records) - min(r["wall_start"] for r in records)
    cpu_share = 0.97 if bound else 0.2
    worker = {"worker": 0, "pid": 4242, "users": level, "requests": len(records), "ok": len(ok),
              "errors": len(records) - len(ok), "out_tokens": tokens, "wall_s": round(wall, 4),
              "cpu_s": round(cpu_share * wall, 4), "cpu_share": cpu_share, "cpu_us_per_token": 50.0,
              "tokens_per_s": round(tokens / wall, 1),
              "lag": {"samples": 100, "p50_ms": 0.1, "p99_ms": 1.0, "max_ms": 2.0},
              "itl": {"gaps": tokens - len(ok), "median_ms": 4.0, "p99_ms": 9.0, "near_zero_share": 0.0}}
    return {
        "schema": 1, "spec": {"concurrency": level, "requests": len(records), "tags": {"level": level}},
        "processes": 1, "usable_cores": 2, "ok": len(ok), "errors": len(records) - len(ok), "out_tokens": tokens,
        "wall_s": round(wall, 4), "tokens_per_s": round(tokens / wall, 1), "stopped": False,
        "client_bound": bound,
        "client_bound_reasons": ["process 0: CPU 97% of one core over the level (limit 85%)"] if bound else [],
        "timing_warnings": [], "thresholds": {"cpu_share": 0.85}, "workers": [worker],
    }


def cell_ids(spec: BundleSpec) -> list[tuple[str, int]]:
    """(arm, repeat) in run order: interleaved."""
    return [(arm, r) for r in range(1, spec.repeats + 1) for arm in spec.arms]


def write_plan(write: Write, spec: BundleSpec) -> None:
    plan = {"order": "interleaved",
            "cells": [{"index": i, "arm": a, "repeat": r, "id": f"{a}-r{r}"} for i, (a, r) in enumerate(cell_ids(spec))],
            "levels": [{"concurrency": c, "requests": spec.requests, "warmup": 8} for c in spec.levels]}
    write("plan.json", _json(plan))


def write_cell(write: Write, spec: BundleSpec, rng: np.random.Generator, arm: str, r: int, t0: float) -> float:
    """One cell's cell.json and levels; returns the wall clock after its last request."""
    cid = f"{arm}-r{r}"
    model = spec.arms[arm]
    cell_mult = float(rng.lognormal(0.0, spec.cell_sd))
    status = "failed" if cid in spec.failed else "ok"
    write(f"cells/{cid}/cell.json", _json({"id": cid, "arm": arm, "repeat": r, "status": status,
                                           "reason": spec.failed.get(cid)}))
    for level in spec.levels:
        d = f"cells/{cid}/level-{level}"
        if spec.toy_records:
            records = _toy_records(arm, level)
            lines = [json.dumps(rec, sort_keys=True) for rec in records]
        else:
            mult = cell_mult * float(rng.lognormal(0.0, spec.cell_level_sd))
            records = _level_records(rng, arm, r, level, model, mult, spec, t0)
            t0 = max(rec["wall_start"] + rec["e2e_ns"] / 1e9 for rec in records) + 1.0
            lines = [json.dumps(rec, separators=(",", ":")) for rec in records]
        write(f"{d}/records.jsonl", "".join(line + "\n" for line in lines).encode())
        write(f"{d}/client.json", _json(client_report(records, level, bound=(cid, level) in spec.client_bound)))
        if spec.server_metrics:
            write(f"{d}/server_metrics.json", _json(_server_metrics(rng, level, model, spec.requests, spec.tokens)))
    return t0


def write_bundle(write: Write, spec: BundleSpec) -> None:
    """Plan and every cell of ``spec``, in run order."""
    rng = np.random.default_rng(spec.seed)
    write_plan(write, spec)
    t0 = 1_700_000_000.0
    for arm, r in cell_ids(spec):
        t0 = write_cell(write, spec, rng, arm, r, t0)


def make_bundle(root: Path, spec: BundleSpec | None = None) -> Path:
    """A bundle's measured files (the demo manifest, plan, cells) in a plain directory ``root``."""
    def write(rel: str, data: bytes) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    root.mkdir(parents=True, exist_ok=True)
    spec = spec or BundleSpec()
    text = DEMO_MANIFEST.read_text(encoding="utf-8")
    if spec.analysis:
        assert "\nanalysis:\n" in text
        text = text.replace("\nanalysis:\n", "\nanalysis:\n" + spec.analysis, 1)
    (root / "manifest.yaml").write_text(text, encoding="utf-8")
    write_bundle(write, spec)
    return root


TOY_REQUESTS = 6

#: The bundle tests' bundle: two arms, one repeat, levels 1 and 4, six small records per level.
SIGNED_SPEC = BundleSpec(arms={"base": ArmModel(), "oea": ArmModel()}, repeats=1, levels=(1, 4), toy_records=True,
                         server_metrics=True, requests=TOY_REQUESTS)

#: The manifest of the bundle tests' bundle (kit.stats reads its arms and analysis settings).
SIGNED_MANIFEST = f"""manifest_version: 1
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
  levels: [1, 4]
  requests_per_level: {TOY_REQUESTS}
  warmup_requests: 0
  output_tokens: 4
  seed: 7
design:
  repeats: 1
analysis:
  resamples: 200
"""


def _cell_extras(b: Bundle, cell_id: str, arm: str) -> None:
    b.write_bytes(f"cells/{cell_id}/server.log", f"starting {arm}\nready\nstopping\n".encode())
    b.append_jsonl(f"cells/{cell_id}/gates.jsonl", {"phase": "before", "ok": True})
    b.append_jsonl(f"cells/{cell_id}/gates.jsonl", {"phase": "after", "ok": True})
    b.write_json(f"cells/{cell_id}/command.json", {"argv": ["python", "-m", "kit.engine", "--arm", arm]})


def build_bundle(results: Path, key: SigningKey, *, experiment: str = "demo", sign: bool = True,
                 spec: BundleSpec = SIGNED_SPEC) -> Bundle:
    """A complete, signed ``kit.bundle.Bundle`` under ``results``: real files, real keys, real signatures."""
    b = Bundle.create(results, experiment)
    # the manifest asks for as many output tokens as the records hold (more would be usage above max_tokens)
    tokens = 4 if spec.toy_records else spec.tokens
    b.write_bytes("manifest.yaml", SIGNED_MANIFEST.replace("output_tokens: 4", f"output_tokens: {tokens}").encode())
    b.write_bytes("manifest.yaml.sig", b'{"payloadType": "application/vnd.in-toto+json"}\n')
    b.write_json("run.json", {"run_id": b.run_id, "experiment": experiment, "kit_version": "0.1.0",
                              "status": "complete", "started": "2025-01-01T00:00:00Z",
                              "finished": "2025-01-01T00:10:00Z", "argv": ["kit", "run", "m.yaml"],
                              "flags": {"allow_unsigned": False, "allow_unpinned": False}})
    write_plan(b.write_bytes, spec)
    b.write_json("environment.json", {"host": {"name": "test"}, "gpus": []})
    rng = np.random.default_rng(spec.seed)
    cells = cell_ids(spec)
    arm, r = cells[-1]  # a first attempt of the last cell that failed and was moved aside on resume
    write_cell(b.write_bytes, spec, rng, arm, r, 0.0)
    _cell_extras(b, f"{arm}-r{r}", arm)
    b.move_failed_attempt(f"{arm}-r{r}")
    t0 = 1_700_000_000.0
    for arm, r in cells:
        t0 = write_cell(b.write_bytes, spec, rng, arm, r, t0)
        _cell_extras(b, f"{arm}-r{r}", arm)
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


def cut_records(root: Path, cell: str, level: int, tokens: int, *, usage: bool = True) -> None:
    """Rewrite a cell's records at ``level`` as a server that ends every response after ``tokens`` tokens would
    send them (fewer chunks; usage counting them, or none with ``usage=False``)."""
    path = root / "cells" / cell / f"level-{level}" / "records.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    for r in recs:
        if r["status"] == 200 and r["error"] is None:
            r["chunk_ns"] = r["chunk_ns"][:tokens]
            r["e2e_ns"] = r["chunk_ns"][-1] + 200_000
            r["client_tokens"] = tokens
            r["usage_completion_tokens"] = tokens if usage else None
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
