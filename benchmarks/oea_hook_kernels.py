"""Where a prelaunched OEA hook's time goes, kernel by kernel, inside the CUDA graph it runs in.

    PYTHONPATH=images/oea:benchmarks python3 benchmarks/oea_hook_kernels.py --out DIR \
        [--cells glm5:256,glm5:128] [--variants default,atomic-r4,...] [--reps 20]

``oea_hook_overhead.py`` times whole graphs (the hook over plain routing); this says which kernel of the
hook's branch is long or late. For each cell (shape:rows) and variant (knobs), one CUDA graph of ``--reps``
layers (kernel A prelaunched on its side stream, the router beside it: ``plain_short``, torch.topk, or with
``--router fused`` ``plain_fused``, one Triton kernel; kernel B after both, as ``oea_hook_overhead.py``'s
``short`` / ``fused`` variants) is replayed under ``torch.profiler`` (CUPTI
traces the kernels a graph launches). Printed per kernel name: how many per layer, mean duration, and the mean
start and end relative to the layer's first kernel; and the layer's mean span (first start to last end). A
layer's span is what the graph's time per layer is made of, less the launch gaps between layers.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

import torch
from gpu_timing import capture, measure
from oea_hook_overhead import SHAPES, Case, hooked

VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "sets": {"KIT_OEA_UNION": "sets"},
    "noprelaunch": {"KIT_OEA_PRELAUNCH": "0"},
    "atomic": {"KIT_OEA_UNION": "atomic"},  # (forced: kernel B's rows per program from the batch)
    "atomic-r2": {"KIT_OEA_UNION": "atomic", "KIT_OEA_SPLIT_ROWS": "2", "KIT_OEA_A_ROWS": "2", "KIT_OEA_A_WARPS": "4"},
    "atomic-r4": {"KIT_OEA_UNION": "atomic", "KIT_OEA_SPLIT_ROWS": "4", "KIT_OEA_A_ROWS": "4", "KIT_OEA_A_WARPS": "4"},
    "sets-r4": {"KIT_OEA_UNION": "sets", "KIT_OEA_SPLIT_ROWS": "4", "KIT_OEA_SPLIT_WARPS": "4"},
    "atomic-r4-a2": {"KIT_OEA_UNION": "atomic", "KIT_OEA_SPLIT_ROWS": "4", "KIT_OEA_A_ROWS": "2", "KIT_OEA_A_WARPS": "4"},
    "atomic-r4-a1": {"KIT_OEA_UNION": "atomic", "KIT_OEA_SPLIT_ROWS": "4", "KIT_OEA_A_ROWS": "1", "KIT_OEA_A_WARPS": "4"},
    # the bit sets with kernel A on its own grid (B's the default's)
    "sets-a4w4": {"KIT_OEA_UNION": "sets", "KIT_OEA_A_ROWS": "4", "KIT_OEA_A_WARPS": "4"},
    "sets-a2w4": {"KIT_OEA_UNION": "sets", "KIT_OEA_A_ROWS": "2", "KIT_OEA_A_WARPS": "4"},
    "sets-a4w2": {"KIT_OEA_UNION": "sets", "KIT_OEA_A_ROWS": "4", "KIT_OEA_A_WARPS": "2"},
}  # fmt: skip


def profile_cell(
    shape_name: str, m: int, env: dict[str, str], reps: int, with_hook: bool, router_name: str
) -> dict[str, Any]:
    device = torch.device("cuda")
    case = Case(SHAPES[shape_name], m, device, seed=m)
    case.plain()
    router = case.plain_fused if router_name == "fused" else case.plain_short
    graph, why = capture(hooked(case, env, router) if with_hook else router, reps, warmup=3)
    if graph is None:
        raise RuntimeError(f"CUDA graph capture failed: {why}")
    # the graph's replays timed as one-call variants (measure's event loop, 5 warm-up replays)
    timed = measure({"layer": graph.replay}, device, reps=1, samples=11, warmup=5, graph=False)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = sorted(
        ((e.time_range.start, e.time_range.end, e.name) for e in prof.events() if e.device_type.name == "CUDA"),
        key=lambda t: t[0],
    )
    del graph
    return {"us_per_layer": round(timed["layer"]["median_us"] / reps, 3), "kernels": kernels}


def summarise(kernels: list[tuple[float, float, str]], reps: int) -> dict[str, Any]:
    """Split the trace into ``reps`` layers of equal kernel count, in start order; per kernel name: count per
    layer, mean duration, mean start and end after the layer's first kernel; the layer's mean span."""
    if not kernels or len(kernels) % reps:
        return {"error": f"{len(kernels)} kernels traced for {reps} layers", "names": sorted({k[2] for k in kernels})}
    per = len(kernels) // reps
    stats: dict[str, dict[str, list[float]]] = {}
    spans, gaps = [], []
    for i in range(reps):
        layer = kernels[i * per : (i + 1) * per]
        t0 = layer[0][0]
        spans.append(max(k[1] for k in layer) - t0)
        if i:
            gaps.append(t0 - max(k[1] for k in kernels[(i - 1) * per : i * per]))
        for s, e, name in layer:
            d = stats.setdefault(name[:60], {"dur": [], "start": [], "end": []})
            d["dur"].append(e - s)
            d["start"].append(s - t0)
            d["end"].append(e - t0)
    return {
        "kernels_per_layer": per,
        "span_us": round(statistics.mean(spans), 2),
        "gap_to_next_layer_us": round(statistics.mean(gaps), 2) if gaps else None,
        "by_kernel": {n: {"per_layer": len(d["dur"]) / reps, "dur_us": round(statistics.mean(d["dur"]), 2),
                          "start_us": round(statistics.mean(d["start"]), 2), "end_us": round(statistics.mean(d["end"]), 2)}
                      for n, d in sorted(stats.items(), key=lambda kv: statistics.mean(kv[1]["start"]))},
    }  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cells", default="glm5:128,glm5:256,glm5:512")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--router", choices=("short", "fused"), default="short",
                   help="plain_short (torch.topk: two kernels) or plain_fused (one Triton kernel, fused_router.py)")
    args = p.parse_args()
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown:
        p.error(f"--variants: unknown {','.join(unknown)}; expected some of {','.join(VARIANTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    with torch.inference_mode():
        for cell in args.cells.split(","):
            shape_name, m = cell.split(":")[0], int(cell.split(":")[1])
            runs = [(f"plain-{args.router}", {}, False)] + [(v, VARIANTS[v], True) for v in args.variants.split(",")]
            for name, env, hook in runs:
                try:
                    raw = profile_cell(shape_name, m, env, args.reps, hook, args.router)
                    row = {"cell": cell, "variant": name, "us_per_layer": raw["us_per_layer"],
                           **summarise(raw["kernels"], args.reps)}  # fmt: skip
                except Exception as exc:  # noqa: BLE001 (one variant's failure is reported; the others still run)
                    row = {"cell": cell, "variant": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                results.append(row)
                print(json.dumps(row), flush=True)
    (args.out / "oea_hook_kernels.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
