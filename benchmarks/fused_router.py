"""A plain router in ONE Triton kernel, for ``oea_hook_overhead.py``'s ``-fused`` variants: the row's scores
(sigmoid + correction bias, or softmax), its top-k, the weights gathered, renormalised and scaled, written into
the int32 ids / fp32 weights, as sglang's fused gate kernels do in one launch (``moe_fused_gate``,
FlashInfer's ``fused_topk_deepseek``). ``torch.topk`` (the ``-short`` variants' router) is two kernels, 12 to
25 us at 128-1024 rows on an H100: a prelaunched kernel A hides behind it where it may not behind a fused
gate. This one is built from the hook's own selection (``kit_oea.triton_oea``'s ``_row_keys`` and
``_select_store`` with every expert active), so it is exactly plain top-k (ties to the lower index), and its
cost is that of kernel B's selection.
"""

# ruff: noqa: N803 (Triton constexpr parameters are upper case by convention)
from __future__ import annotations

import torch
import triton
import triton.language as tl
from kit_oea import triton_oea as tk


@triton.jit
def _fused_router_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, M, N, scale,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, SOFTMAX: tl.constexpr, RENORMALIZE: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    key, mx, den = tk._row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
    tk._select_store(key, mx, den, nmask, rows, rmask, rmask, logits_ptr, stride_l, ids_ptr, stride_i, w_ptr,
                     stride_w, scale, K, BLOCK_N, BLOCK_K, SOFTMAX, RENORMALIZE)  # fmt: skip


def fused_route(
    logits: torch.Tensor, bias: torch.Tensor | None, ids: torch.Tensor, w: torch.Tensor, *, k: int, softmax: bool,
    scale: float | None,
) -> None:  # fmt: skip
    """Plain top-k routing of ``logits`` [M, N] into ``ids`` / ``w`` [M, k], one launch."""
    m, n = logits.shape
    block_n, block_k = max(triton.next_power_of_2(n), 32), triton.next_power_of_2(k)
    # the split kernels' default rows per program (not _split_layout: its knob would move this baseline too)
    block_m = min(triton.next_power_of_2(triton.cdiv(m, tk._sms(logits.device))), max(1, tk._SPLIT_TILE // block_n))
    _fused_router_kernel[(triton.cdiv(m, block_m),)](
        logits, logits.stride(0), bias if bias is not None else logits, ids, ids.stride(0), w, w.stride(0), m, n,
        1.0 if scale is None else float(scale), K=k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        HAS_BIAS=bias is not None, SOFTMAX=softmax, RENORMALIZE=True, num_warps=4,
    )  # fmt: skip
