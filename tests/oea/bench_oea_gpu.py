"""Cost of the OEA hook per MoE layer on a GPU, under a CUDA graph (how sglang runs decode).

Not a test (pytest does not collect it). Run on a GPU machine:
``python tests/oea/bench_oea_gpu.py [--out FILE]``. For each decode batch size it captures one graph of
REPS back-to-back calls of (a) a plain GLM-5-style routing step (sigmoid, + bias, top-8, gather,
renormalise, scale), (b) the same step followed by the torch-ops OEA hook and (c) followed by the fused
Triton hook, replays each graph, and reports the extra microseconds per call from CUDA events, plus the distinct experts per layer (T) with and without OEA on
random router logits (a lower bound on what real, more concentrated routing gives).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "oea"))
from kit_oea import triton_oea
from kit_oea.oea import oea_reroute_, reroute_torch_

N, K, K0, SCALE, REPS = 256, 8, 4, 2.5, 75


def plain_route(logits: torch.Tensor, bias: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> None:
    s = torch.sigmoid(logits.float())
    top = (s + bias).topk(K, dim=1).indices
    weights = s.gather(1, top)
    w.copy_(weights / weights.sum(1, keepdim=True) * SCALE)
    ids.copy_(top)


def oea_torch(logits: torch.Tensor, bias: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> None:
    plain_route(logits, bias, ids, w)
    reroute_torch_(ids, w, logits, k0=K0, k=K, scoring_func="sigmoid", correction_bias=bias, renormalize=True,
                   routed_scaling_factor=SCALE, num_token_non_padded=None)  # fmt: skip


def oea_triton(logits: torch.Tensor, bias: torch.Tensor, ids: torch.Tensor, w: torch.Tensor) -> None:
    plain_route(logits, bias, ids, w)
    triton_oea.oea_reroute_triton_(ids, w, logits, k0=K0, k=K, softmax=False, correction_bias=bias,
                                   renormalize=True, routed_scaling_factor=SCALE, num_token_non_padded=None)  # fmt: skip


def time_graph(step: Callable[..., None], m: int) -> float:
    logits = torch.randn(m, N, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(N, device="cuda") * 0.3
    ids = torch.empty(m, K, dtype=torch.int32, device="cuda")
    w = torch.empty(m, K, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(logits, bias, ids, w)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(REPS):
            step(logits, bias, ids, w)
    for _ in range(5):
        graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(20):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000 / REPS)
    samples.sort()
    return samples[len(samples) // 2]


def distinct_experts(m: int, trials: int = 20) -> tuple[float, float]:
    plain, oea = [], []
    for _ in range(trials):
        logits = torch.randn(m, N, device="cuda")
        bias = torch.randn(N, device="cuda") * 0.01
        ids = torch.empty(m, K, dtype=torch.int32, device="cuda")
        w = torch.empty(m, K, device="cuda")
        plain_route(logits, bias, ids, w)
        plain.append(ids.unique().numel())
        oea_reroute_(ids, w, logits, k0=K0, k=K, scoring_func="sigmoid", correction_bias=bias, renormalize=True,
                     routed_scaling_factor=SCALE, num_token_non_padded=None)  # fmt: skip
        oea.append(ids[w > 0].unique().numel())
    return sum(plain) / trials, sum(oea) / trials


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for m in (1, 4, 16, 64, 256, 1024):
        plain_us = time_graph(plain_route, m)
        torch_us, triton_us = time_graph(oea_torch, m), time_graph(oea_triton, m)
        t_plain, t_oea = distinct_experts(m)
        row = {"batch": m, "plain_us": round(plain_us, 2), "oea_torch_extra_us": round(torch_us - plain_us, 2),
               "oea_triton_extra_us": round(triton_us - plain_us, 2), "T_plain": t_plain, "T_oea": t_oea}  # fmt: skip
        rows.append(row)
        print(json.dumps(row), flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "N": N, "k": K, "k0": K0,
              "reps_per_graph": REPS, "rows": rows}  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
