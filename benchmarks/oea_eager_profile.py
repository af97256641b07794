"""Where an eager (no CUDA graph) decode step spends its time, baseline vs OEA: the why behind moe_decode_step's
"OEA is slower without graphs".

    PYTHONPATH=images/oea python3 benchmarks/oea_eager_profile.py --out DIR [--layers 8] [--batch 4]
        [--impl grouped_mm] [--steps 20]

Builds the same model and replayable decode step as ``moe_decode_step.py`` (its functions), then per arm
(baseline, OEA k0=3 through ``kit_oea.hf``): the host time to enqueue one step (``perf_counter`` around the
step, then a synchronize timed on its own) and the step's wall time, the arms alternating step by step (a
first version timed them one after the other; see benchmarks/results/h200-kernels-2026-12-01), and a
``torch.profiler`` table of the
operators with the most host (self CPU) time, with the count of device-to-host synchronisations
(``aten::item`` / ``aten::_local_scalar_dense`` / ``cudaStreamSynchronize``). Output: Markdown on stdout and
``oea_eager_profile.json`` / ``.md`` in ``--out``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from gpu_timing import environment, write_results

SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "cudaStreamSynchronize", "cudaDeviceSynchronize")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path)
    p.add_argument("--shape", default="qwen3-30b-a3b", help="a shape of moe_decode_step.py (tiny-cpu for smoke tests)")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--impl", default="grouped_mm")
    p.add_argument("--k0", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=12)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    return p.parse_args(argv)


def time_arms(arms: dict[str, Any], device: torch.device, steps: int) -> dict[str, dict[str, float]]:
    """Median host enqueue time and wall time of one step per arm, the arms alternating step by step (a host
    that slows down or speeds up during the run then affects every arm alike)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for fn in arms.values():
        for _ in range(3):
            fn()
    sync()
    enqueue: dict[str, list[float]] = {name: [] for name in arms}
    wall: dict[str, list[float]] = {name: [] for name in arms}
    for _ in range(steps):
        for name, fn in arms.items():
            t0 = time.perf_counter()
            fn()
            t1 = time.perf_counter()
            sync()
            t2 = time.perf_counter()
            enqueue[name].append((t1 - t0) * 1e6)
            wall[name].append((t2 - t0) * 1e6)
    return {name: {"enqueue_us_median": statistics.median(enqueue[name]),
                   "wall_us_median": statistics.median(wall[name])} for name in arms}  # fmt: skip


def profile_arm(step: Any, device: torch.device, steps: int, top: int) -> dict[str, Any]:
    """Operator counts and host time per step under ``torch.profiler`` (one arm at a time: counts, not timings)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        sync()
    events = prof.key_averages()
    rows = sorted(events, key=lambda e: e.self_cpu_time_total, reverse=True)[:top]
    syncs = {e.key: e.count // steps for e in events if e.key in SYNC_OPS}
    return {
        "syncs_per_step": syncs,
        "top_self_cpu": [
            {"op": e.key, "calls_per_step": e.count / steps, "self_cpu_us_per_step": e.self_cpu_time_total / steps}
            for e in rows
        ],
    }


def main(argv: list[str] | None = None) -> int:
    import moe_decode_step as mds

    args = parse_args(argv)
    device = torch.device(args.device)
    ns = argparse.Namespace(shape=args.shape, layers=args.layers, seed=0, prompt_len=args.prompt_len)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = mds.build_model(ns, device, dtype)
    mds.patch_router(norm_default=bool(model.config.norm_topk_prob))
    result: dict[str, Any] = {"benchmark": "oea_eager_profile", "env": environment(), "args": vars(args) | {"out": None}}
    with torch.inference_mode():
        state = mds.prefill(model, args.batch, ns, device)
        model.set_experts_implementation(args.impl)
        kw = mds.cache_kwarg(model)

        def step() -> object:
            state["lengths"].fill_(ns.prompt_len)
            return model(input_ids=state["ids"], position_ids=state["pos"], use_cache=True, **{kw: state["cache"]})

        arms = {"baseline": mds.with_arm(0, "auto", step), "oea": mds.with_arm(args.k0, "auto", step)}
        timings = time_arms(arms, device, args.steps)
        result["arms"] = {name: timings[name] | profile_arm(fn, device, args.steps, args.top) for name, fn in arms.items()}
    lines = [f"## Eager decode step, {args.impl}, batch {args.batch}, {args.layers} layers (per step)", ""]
    for name, r in result["arms"].items():
        lines.append(f"- {name}: enqueue {r['enqueue_us_median']:.0f} us, wall {r['wall_us_median']:.0f} us, "
                     f"syncs {r['syncs_per_step'] or 'none'}")  # fmt: skip
    for name, r in result["arms"].items():
        lines += ["", f"### {name}: top operators by self CPU time", "", "| op | calls | self CPU us |", "|---|---|---|"]
        lines += [f"| {t['op']} | {t['calls_per_step']:.1f} | {t['self_cpu_us_per_step']:.1f} |" for t in r["top_self_cpu"]]
    report = "\n".join(lines)
    print(report, flush=True)
    write_results(args.out, "oea_eager_profile", result, report)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "images" / "oea"))
    raise SystemExit(main())
