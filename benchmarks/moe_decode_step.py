"""Known answer for kit's transformers A/B: one MoE layer and one decode step, baseline vs OEA, measured without kit.

    PYTHONPATH=images/oea python3 benchmarks/moe_decode_step.py --out DIR [--shape qwen3-30b-a3b] [--layers 12]
        [--impls grouped_mm,batched_mm,eager] [--batches 1,4,16,64] [--k0 3] [--oea-paths auto]
        [--prompt-len 256] [--parts moe,step] [--max-seconds 240]

Builds ``Qwen3MoeForCausalLM`` from a config (no hub): shape ``qwen3-30b-a3b`` (hidden 2048, 128 experts,
top-8, MoE intermediate 768, 32 heads / 4 KV heads of 128, vocab 151936; ``--layers`` layers, default 12)
or ``tiny-cpu`` (smoke tests), seeded random weights (normal, std 0.02; norms 1), bf16 on CUDA, fp32 on
the CPU. OEA is the shared hook ``kit_oea.hf.reroute_router_output`` applied to the output of
``Qwen3MoeTopKRouter.forward`` (decode only: the prompt's prefill runs without it). ``--oea-paths``
picks which path of the fused kernels (``kit_oea.triton_oea``: ``auto``, ``single``, ``split``,
set as ``KIT_OEA_PATH``) the OEA arm takes on CUDA, one OEA arm each.

Per experts implementation (``model.set_experts_implementation``) and batch size it times, with the
baseline and OEA arms interleaved (see ``gpu_timing.measure``: CUDA events, warm-up, median and IQR,
under a CUDA graph where capture works, each row saying which):

- ``moe``: one real ``Qwen3MoeSparseMoeBlock`` (router + experts), input ``[B, 1, hidden]`` standard
  normal; the graph cycles through the model's first ``--moe-blocks`` layers' blocks, each with its own
  input, so consecutive calls do not find their expert weights in L2. Beside each figure: the distinct
  experts touched per layer T and the HBM floor for them (T x gate/up/down bf16 + the router, over
  ``--hbm-tbps``), and the achieved fraction of it.
- ``step``: one decode step, ``model(input_ids [B, 1])`` at position P with a ``StaticCache`` holding a
  P-token prompt (prefilled once per batch size), logits included, plus one fill kernel that rewinds the
  cache to P (so the step can be replayed); the distinct experts per layer during that step (mean over
  layers).

The batch-16 ``moe`` rows are the OEA paper's MoE-layer table at its setting (Qwen3-30B-A3B, batch 16,
k0 = 3; 1x H100 in the paper: 175.7 -> 106.8 us, -39 %, T 48.8 -> 25.1 on real routing; random routing
touches more experts). Output: a Markdown table on stdout and ``moe_decode_step.json`` (plus
``moe_decode_step.md``) in ``--out``.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from gpu_timing import Budget, call_time_s, copy_tbps, environment, log, measure, plan, write_json, write_results
from moe_decode_report import PAPER, ratios, render

SHAPES: dict[str, dict[str, Any]] = {
    "qwen3-30b-a3b": {
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 12,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": True, "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    },
    "tiny-cpu": {
        "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "moe_intermediate_size": 64,
        "num_experts": 16, "num_experts_per_tok": 4, "norm_topk_prob": True, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    },
}  # fmt: skip
NO_GRAPH = {"eager": "the eager experts loop calls nonzero() per layer, a host sync that graph capture refuses"}
ROUTER: dict[str, Any] = {"k0": 0, "record": None}  # read by the patched router on every call


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="directory for moe_decode_step.json / .md")
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-30b-a3b")
    p.add_argument("--layers", type=int, help="number of decoder layers (default: the shape's)")
    p.add_argument("--impls", default="grouped_mm,batched_mm,eager")
    p.add_argument("--batches", default="1,4,16,64")
    p.add_argument("--k0", type=int, default=3)
    p.add_argument("--oea-paths", default="auto", help="comma list of auto,single,split (one OEA arm each)")
    p.add_argument("--parts", default="moe,step", help="comma list of moe,step")
    p.add_argument("--prompt-len", type=int, default=256)
    p.add_argument("--moe-blocks", type=int, default=4, help="distinct MoE blocks cycled in the moe timing")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--cell-seconds", type=float, default=6.0, help="timing budget per (impl, batch, part)")
    p.add_argument("--max-samples", type=int, default=40)
    p.add_argument("--min-sample-ms", type=float, default=3.0, help="replay length per sample (reps per graph)")
    p.add_argument("--max-seconds", type=float, default=300.0, help="stop starting new cells after this")
    p.add_argument("--hbm-tbps", type=float, default=4.8, help="HBM bandwidth for the roofline (H200: 4.8)")
    p.add_argument("--no-graph", action="store_true", help="never capture CUDA graphs")
    return p.parse_args(argv)


def build_model(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    fields = dict(SHAPES[args.shape])
    if args.layers:
        fields["num_hidden_layers"] = args.layers
    config = Qwen3MoeConfig(**fields)
    config._attn_implementation = "sdpa"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = Qwen3MoeForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    gen = torch.Generator(device=device).manual_seed(args.seed)
    with torch.no_grad():
        for _name, param in sorted(model.named_parameters()):
            if param.dim() == 1:  # RMSNorm weights
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=gen)
    return model.eval()


def patch_router(norm_default: bool) -> None:
    """Wrap ``Qwen3MoeTopKRouter.forward``: OEA through the shared hook when ROUTER['k0'], counting when asked."""
    from kit_oea.hf import reroute_router_output
    from transformers.models.qwen3_moe import modeling_qwen3_moe as qm

    original = qm.Qwen3MoeTopKRouter.forward

    def forward(self: Any, hidden_states: torch.Tensor) -> Any:
        logits, weights, ids = original(self, hidden_states)
        if ROUTER["k0"]:
            norm = bool(getattr(self, "norm_topk_prob", norm_default))
            logits, weights, ids = reroute_router_output(logits, weights, ids, k0=ROUTER["k0"], norm_topk_prob=norm)
        if ROUTER["record"] is not None:
            ROUTER["record"].append(int(torch.unique(ids).numel()))
        return logits, weights, ids

    qm.Qwen3MoeTopKRouter.forward = forward


def select_oea_path(path: str) -> None:
    """The fused kernels' path for the next calls (``KIT_OEA_PATH``, read per call; a no-op on the CPU)."""
    os.environ["KIT_OEA_PATH"] = path


def arms(kernels: list[str], k0: int) -> list[tuple[str, int, str]]:
    return [("baseline", 0, "auto")] + [(f"oea-{kern}" if len(kernels) > 1 else "oea", k0, kern) for kern in kernels]


def with_arm(k0: int, path: str, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` run with the router set for one arm (a Python flag, fixed when a graph is captured)."""

    def run() -> object:
        select_oea_path(path)
        ROUTER["k0"] = k0
        try:
            return fn()
        finally:
            ROUTER["k0"] = 0

    return run


def count_experts(fn: Callable[[], object]) -> float:
    ROUTER["record"] = []
    try:
        fn()
        counts = ROUTER["record"]
    finally:
        ROUTER["record"] = None
    return sum(counts) / max(len(counts), 1)


def moe_bytes(config: Any, touched: float, dtype_bytes: int = 2) -> float:
    expert = 3 * config.hidden_size * config.moe_intermediate_size * dtype_bytes
    return touched * expert + config.num_experts * config.hidden_size * dtype_bytes


def probe(fns: dict[str, Callable[[], object]], cell: str) -> tuple[dict[str, float], dict[str, str]]:
    """Distinct experts per layer for every arm, run once without a graph; an arm that fails is dropped
    from ``fns`` (and reported) so the others are still timed."""
    touched: dict[str, float] = {}
    errors: dict[str, str] = {}
    for name in list(fns):
        try:
            touched[name] = count_experts(fns[name])
        except Exception as exc:
            if name == "baseline":
                raise
            errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log(f"{cell}: arm {name} FAILED {errors[name]}")
            del fns[name]
    return touched, errors


def time_cell(fns: dict[str, Callable[[], object]], device: torch.device, args: argparse.Namespace, impl: str) -> Any:
    first = next(iter(fns.values()))
    call_s = call_time_s(first, device)
    reps, samples = plan(call_s, arms=len(fns), cell_seconds=args.cell_seconds, min_sample_ms=args.min_sample_ms,
                         max_samples=args.max_samples)  # fmt: skip
    graph = not args.no_graph and impl not in NO_GRAPH
    return measure(fns, device, reps=reps, samples=samples, graph=graph, no_graph_reason=NO_GRAPH.get(impl, ""))


def moe_cell(model: Any, impl: str, batch: int, args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    config = model.config
    blocks = [layer.mlp for layer in model.model.layers[: args.moe_blocks]]
    gen = torch.Generator(device=device).manual_seed(args.seed + batch)
    dtype = next(model.parameters()).dtype
    xs = [torch.randn(batch, 1, config.hidden_size, generator=gen, device=device).to(dtype) for _ in blocks]

    def layer_calls() -> None:
        for block, x in zip(blocks, xs, strict=True):
            block(x)

    fns = {name: with_arm(k0, kern, layer_calls) for name, k0, kern in arms(args.kernel_list, args.k0)}
    touched, errors = probe(fns, f"moe {impl} batch {batch}")
    res = time_cell(fns, device, args, impl)
    rows = [{"part": "moe", "impl": impl, "batch": batch, "arm": name, "us": None, "mode": why}
            for name, why in errors.items()]  # fmt: skip
    for name, r in res.items():
        per_layer = r["median_us"] / len(blocks)
        floor_us = moe_bytes(config, touched[name]) / (args.hbm_tbps * 1e12) * 1e6
        copy_floor_us = moe_bytes(config, touched[name]) / (args.copy_tbps * 1e12) * 1e6 if args.copy_tbps else None
        rows.append({
            "part": "moe", "impl": impl, "batch": batch, "arm": name, "us": round(per_layer, 2),
            "q1_us": round(r["q1_us"] / len(blocks), 2), "q3_us": round(r["q3_us"] / len(blocks), 2),
            "T": round(touched[name], 2), "weight_MB": round(moe_bytes(config, touched[name]) / 1e6, 1),
            "floor_us": round(floor_us, 2), "roofline_frac": round(floor_us / per_layer, 3) if per_layer > 0 else None,
            "copy_frac": round(copy_floor_us / per_layer, 3) if copy_floor_us and per_layer > 0 else None,
            "samples": r["samples"], "reps": r["reps"], "mode": r["mode"],
        })  # fmt: skip
    return rows


def prefill(model: Any, batch: int, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from transformers import StaticCache

    cache = StaticCache(config=model.config, max_cache_len=args.prompt_len + 8)
    gen = torch.Generator(device=device).manual_seed(args.seed + 7 * batch)
    prompt = torch.randint(0, model.config.vocab_size, (batch, args.prompt_len), generator=gen, device=device)
    kw = cache_kwarg(model)
    model.set_experts_implementation("grouped_mm")
    model(input_ids=prompt, use_cache=True, **{kw: cache})
    # The static layers advance a device counter (cumulative_length) on every update; a decode step replayed
    # many times must write the same slot, so every layer's counter becomes a view of one tensor that each
    # step first resets to P (one fill kernel per step, in both arms).
    lengths = torch.full((len(cache.layers),), args.prompt_len, dtype=torch.long, device=device)
    for i, layer in enumerate(cache.layers):
        layer.cumulative_length = lengths[i]
    return {
        "cache": cache,
        "prompt": prompt,
        "lengths": lengths,
        "ids": torch.randint(0, model.config.vocab_size, (batch, 1), generator=gen, device=device),
        "pos": torch.full((batch, 1), args.prompt_len, device=device, dtype=torch.long),
    }


def cache_kwarg(model: Any) -> str:
    """``cache`` in newer transformers (``past_key_values`` deprecated in 5.2x), ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


def step_cell(model: Any, state: dict[str, Any], impl: str, batch: int, args: argparse.Namespace,
              device: torch.device) -> list[dict[str, Any]]:  # fmt: skip
    kw = cache_kwarg(model)

    def step() -> object:
        state["lengths"].fill_(args.prompt_len)
        return model(input_ids=state["ids"], position_ids=state["pos"], use_cache=True, **{kw: state["cache"]})

    fns = {name: with_arm(k0, kern, step) for name, k0, kern in arms(args.kernel_list, args.k0)}
    touched, errors = probe(fns, f"step {impl} batch {batch}")
    res = time_cell(fns, device, args, impl)
    return [
        {"part": "step", "impl": impl, "batch": batch, "arm": name, "us": r["median_us"], "q1_us": r["q1_us"],
         "q3_us": r["q3_us"], "T": round(touched[name], 2), "samples": r["samples"], "reps": r["reps"],
         "mode": r["mode"]}
        for name, r in res.items()
    ] + [{"part": "step", "impl": impl, "batch": batch, "arm": name, "us": None, "mode": why}
         for name, why in errors.items()]  # fmt: skip


def check_step(model: Any, state: dict[str, Any], args: argparse.Namespace) -> float:
    """Relative difference between the replayable step's logits and a cache-free forward of prompt + token."""
    kw = cache_kwarg(model)
    model.set_experts_implementation("grouped_mm")
    state["lengths"].fill_(args.prompt_len)
    step = model(input_ids=state["ids"], position_ids=state["pos"], use_cache=True, **{kw: state["cache"]})
    full = model(input_ids=torch.cat([state["prompt"], state["ids"]], dim=1), use_cache=False)
    a, b = step.logits[:, -1].float(), full.logits[:, -1].float()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget = Budget(args.max_seconds)
    device = torch.device(args.device)
    if device.type == "cpu":
        torch.set_num_threads(1)  # CPU runs are smoke tests on shared machines: no spinning thread pool
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    args.kernel_list = [k.strip() for k in args.oea_paths.split(",") if k.strip()]
    impls = [s.strip() for s in args.impls.split(",") if s.strip()]
    batches = [int(s) for s in args.batches.split(",") if s.strip()]
    parts = [s.strip() for s in args.parts.split(",") if s.strip()]
    t0 = time.monotonic()
    args.copy_tbps = copy_tbps(device)
    if args.copy_tbps:
        log(f"device-to-device copy: {args.copy_tbps} TB/s (read + written), the practical HBM ceiling")
    model = build_model(args, device, dtype)
    patch_router(bool(model.config.norm_topk_prob))
    log(f"model {args.shape} x{model.config.num_hidden_layers} layers on {device} ({dtype}) built in "
        f"{time.monotonic() - t0:.1f} s; arms {[a[0] for a in arms(args.kernel_list, args.k0)]}")  # fmt: skip
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    checks: dict[int, float] = {}
    with torch.inference_mode():
        for batch in batches:
            state = prefill(model, batch, args, device) if "step" in parts and not budget.spent() else None
            if state is not None:
                checks[batch] = float(f"{check_step(model, state, args):.3g}")
                log(f"batch {batch}: step logits vs a cache-free forward, relative difference {checks[batch]}")
            for impl in impls:
                for part in parts:
                    cell = f"{part} {impl} batch {batch}"
                    if budget.spent():
                        skipped.append(cell)
                        continue
                    t_cell = time.monotonic()
                    model.set_experts_implementation(impl)
                    try:
                        if part == "moe":
                            new = moe_cell(model, impl, batch, args, device)
                        else:
                            new = step_cell(model, state, impl, batch, args, device)
                    except Exception as exc:  # noqa: BLE001 (record the failure, go on with the next cell)
                        log(f"{cell}: FAILED {type(exc).__name__}: {exc}")
                        rows.append({"part": part, "impl": impl, "batch": batch, "arm": "error", "us": None,
                                     "mode": f"{type(exc).__name__}: {str(exc)[:200]}"})  # fmt: skip
                        continue
                    rows.extend(new)
                    write_json(args.out, "moe_decode_step.json", {"partial": True, "rows": rows, "checks": checks})
                    timed = [r for r in new if r["us"] is not None]
                    summary = ", ".join(f"{r['arm']} {r['us']:.1f} us T={r['T']}" for r in timed)
                    log(f"{cell}: {summary} [{timed[0]['mode']}] ({time.monotonic() - t_cell:.1f} s)")
            del state
    result = {
        "benchmark": "moe_decode_step", "env": environment(), "shape": args.shape,
        "config": {**SHAPES[args.shape], "num_hidden_layers": model.config.num_hidden_layers},
        "k0": args.k0, "prompt_len": args.prompt_len, "moe_blocks": args.moe_blocks, "hbm_tbps": args.hbm_tbps,
        "copy_tbps": args.copy_tbps,
        "paper": PAPER, "step_check_rel_diff": checks, "rows": rows, "ratios": ratios(rows), "skipped": skipped,
        "seconds": round(time.monotonic() - t0, 1), "argv": sys.argv[1:] if argv is None else argv,
    }  # fmt: skip
    report = render(result)
    print(report, flush=True)
    write_results(args.out, "moe_decode_step", result, report)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "images" / "oea"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    raise SystemExit(main())
