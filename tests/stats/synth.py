"""Synthetic bundles with real files: a closed-loop streaming load simulated per cell and level.

Each arm has a latency model; every cell (repeat) draws one random multiplier (the server lifetime's speed) and
every cell x level a smaller one (drift), so repeats differ the way real server restarts do.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
DEMO_MANIFEST = ROOT / "experiments" / "demo.yaml"
LEVELS = (1, 4, 16, 64)
LAYERS = 4


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


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def make_bundle(root: Path, spec: BundleSpec | None = None) -> Path:
    """Write a bundle (manifest, plan, cells with records, client.json, optional server metrics) under root."""
    spec = spec or BundleSpec()
    rng = np.random.default_rng(spec.seed)
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DEMO_MANIFEST, root / "manifest.yaml")
    cells = [(arm, r) for r in range(1, spec.repeats + 1) for arm in spec.arms]
    plan = {"order": "interleaved",
            "cells": [{"index": i, "arm": a, "repeat": r, "id": f"{a}-r{r}"} for i, (a, r) in enumerate(cells)],
            "levels": [{"concurrency": c, "requests": spec.requests, "warmup": 8} for c in spec.levels]}
    _write_json(root / "plan.json", plan)
    t0 = 1_700_000_000.0
    for arm, r in cells:
        cid = f"{arm}-r{r}"
        model = spec.arms[arm]
        cell_mult = float(rng.lognormal(0.0, spec.cell_sd))
        status = "failed" if cid in spec.failed else "ok"
        _write_json(root / "cells" / cid / "cell.json",
                    {"id": cid, "arm": arm, "repeat": r, "status": status, "reason": spec.failed.get(cid)})
        for level in spec.levels:
            mult = cell_mult * float(rng.lognormal(0.0, spec.cell_level_sd))
            d = root / "cells" / cid / f"level-{level}"
            records = _level_records(rng, arm, r, level, model, mult, spec, t0)
            t0 = max(rec["wall_start"] + rec["e2e_ns"] / 1e9 for rec in records) + 1.0
            d.mkdir(parents=True, exist_ok=True)
            (d / "records.jsonl").write_text(
                "".join(json.dumps(rec, separators=(",", ":")) + "\n" for rec in records), encoding="utf-8")
            _write_json(d / "client.json", client_report(records, level, bound=(cid, level) in spec.client_bound))
            if spec.server_metrics:
                _write_json(d / "server_metrics.json",
                            _server_metrics(rng, level, model, spec.requests, spec.tokens))
    return root
