"""The OEA hook as two fused Triton kernels (plus one memset): the fast path on CUDA.

Same contract as ``kit_oea.oea.oea_reroute_`` (which is the reference and the fallback). One program
per token row; a row is a vector of N <= 1024 experts held in registers.

1. ``_union_kernel``: scores from the logits, rank = scores + bias, the row's top-k0 by repeated argmax
   (ties to the lower index, like a stable descending sort), marked in ``active[N]`` when the row is valid.
2. ``_select_kernel``: the row's top-k among the active experts, the same way; fillers are the row's
   top-1 with weight 0; weights are the unbiased scores, renormalised and scaled; written in place into
   the first k columns; invalid rows get -1 / 0.

The kernels launch on the current stream with fixed grids, so they are CUDA-graph safe.
"""

# ruff: noqa: N803 (Triton constexpr parameters are upper case by convention)
from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_EXPERTS = 1024


@triton.jit
def _row_rank(logits_ptr, stride_l, bias_ptr, row, offs, mask, HAS_BIAS: tl.constexpr, SOFTMAX: tl.constexpr):
    x = tl.load(logits_ptr + row * stride_l + offs, mask=mask, other=float("-inf")).to(tl.float32)
    if SOFTMAX:
        e = tl.exp(x - tl.max(x, axis=0))
        e = tl.where(mask, e, 0.0)
        s = e / tl.sum(e, axis=0)
    else:
        s = 1.0 / (1.0 + tl.exp(-x))
    s = tl.where(mask, s, 0.0)
    r = s
    if HAS_BIAS:
        r = s + tl.load(bias_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.where(mask, r, float("-inf"))
    return s, r


@triton.jit
def _row_valid(ids_ptr, stride_i, ntnp_ptr, row, K: tl.constexpr, BLOCK_K: tl.constexpr, HAS_NTNP: tl.constexpr):
    koffs = tl.arange(0, BLOCK_K)
    ids = tl.load(ids_ptr + row * stride_i + koffs, mask=koffs < K, other=-1)
    valid = tl.max((ids >= 0).to(tl.int32), axis=0) > 0
    if HAS_NTNP:
        valid = valid & (row < tl.load(ntnp_ptr))
    return valid


@triton.jit
def _union_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, ntnp_ptr, active_ptr, N,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    _, r = _row_rank(logits_ptr, stride_l, bias_ptr, row, offs, mask, HAS_BIAS, SOFTMAX)
    valid = _row_valid(ids_ptr, stride_i, ntnp_ptr, row, K, BLOCK_K, HAS_NTNP)
    for _ in tl.static_range(K0):
        idx = tl.argmax(r, axis=0, tie_break_left=True)
        tl.store(active_ptr + idx, 1, mask=valid)
        r = tl.where(offs == idx, float("-inf"), r)


@triton.jit
def _select_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, ntnp_ptr, active_ptr, N, scale,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr,
    HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr, RENORMALIZE: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    koffs = tl.arange(0, BLOCK_K)
    s, r = _row_rank(logits_ptr, stride_l, bias_ptr, row, offs, mask, HAS_BIAS, SOFTMAX)
    valid = _row_valid(ids_ptr, stride_i, ntnp_ptr, row, K, BLOCK_K, HAS_NTNP)
    active = tl.load(active_ptr + offs, mask=mask, other=0) > 0
    n_active = tl.sum(active.to(tl.int32), axis=0)
    top1 = tl.argmax(r, axis=0, tie_break_left=True)
    r = tl.where(active, r, float("-inf"))
    out_ids = tl.zeros([BLOCK_K], dtype=tl.int32) + top1
    out_w = tl.zeros([BLOCK_K], dtype=tl.float32)
    for j in tl.static_range(K):
        idx = tl.argmax(r, axis=0, tie_break_left=True)
        take = j < n_active
        w = tl.sum(tl.where(offs == idx, s, 0.0), axis=0)
        out_ids = tl.where((koffs == j) & take, idx, out_ids)
        out_w = tl.where((koffs == j) & take, w, out_w)
        r = tl.where(offs == idx, float("-inf"), r)
    if RENORMALIZE:
        total = tl.sum(out_w, axis=0)
        out_w = out_w / tl.where(total > 0, total, 1.0)
    out_w = out_w * scale
    out_ids = tl.where(valid, out_ids, -1)
    out_w = tl.where(valid, out_w, 0.0)
    kmask = koffs < K
    tl.store(ids_ptr + row * stride_i + koffs, out_ids.to(ids_ptr.dtype.element_ty), mask=kmask)
    tl.store(w_ptr + row * stride_w + koffs, out_w.to(w_ptr.dtype.element_ty), mask=kmask)


def supports(
    router_logits: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    correction_bias: torch.Tensor | None,
) -> bool:
    """Whether the fused path takes these tensors: CUDA, N <= MAX_EXPERTS, unit stride along the expert
    and slot axes, and no bias or a contiguous ``[N]`` one (a per-token ``[M, N]`` bias takes the torch path)."""
    return (
        router_logits.is_cuda
        and router_logits.shape[1] <= MAX_EXPERTS
        and router_logits.stride(1) == 1
        and topk_ids.stride(1) == 1
        and topk_weights.stride(1) == 1
        and (correction_bias is None or (correction_bias.dim() == 1 and correction_bias.is_contiguous()))
    )


def oea_reroute_triton_(
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    router_logits: torch.Tensor,
    *,
    k0: int,
    k: int,
    softmax: bool,
    correction_bias: torch.Tensor | None,
    renormalize: bool,
    routed_scaling_factor: float | None,
    num_token_non_padded: torch.Tensor | None,
) -> None:
    """The fused OEA step; arguments already checked by ``kit_oea.oea.oea_reroute_``."""
    m, n = router_logits.shape
    active = torch.zeros(n, dtype=torch.int32, device=router_logits.device)
    if m == 0:
        return
    block_n, block_k = triton.next_power_of_2(n), triton.next_power_of_2(k)
    bias = correction_bias if correction_bias is not None else active
    ntnp = num_token_non_padded if num_token_non_padded is not None else active
    common = {"HAS_BIAS": correction_bias is not None, "HAS_NTNP": num_token_non_padded is not None, "SOFTMAX": softmax}
    stride_l, stride_i = router_logits.stride(0), topk_ids.stride(0)
    _union_kernel[(m,)](
        router_logits, stride_l, bias, topk_ids, stride_i, ntnp, active, n,
        K=k, K0=k0, BLOCK_N=block_n, BLOCK_K=block_k, **common,
    )  # fmt: skip
    _select_kernel[(m,)](
        router_logits, stride_l, bias, topk_ids, stride_i, topk_weights, topk_weights.stride(0), ntnp, active, n,
        1.0 if routed_scaling_factor is None else float(routed_scaling_factor),
        K=k, BLOCK_N=block_n, BLOCK_K=block_k, RENORMALIZE=renormalize, **common,
    )  # fmt: skip
