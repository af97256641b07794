"""OEA for Hugging Face transformers' Qwen3-MoE router: the same hook the sglang patch calls.

``Qwen3MoeTopKRouter.forward`` returns ``(router_logits, routing_weights, selected_experts)``: raw logits
``[M, E]``, top-k weights ``[M, k]`` in the logits' dtype (softmax probabilities, renormalised over the
top-k when ``norm_topk_prob``) and expert ids ``[M, k]`` int64. ``reroute_router_output`` takes that
triple and returns the OEA triple, computed by ``kit_oea.oea.oea_reroute_`` (the fused Triton kernels on
CUDA, torch ops elsewhere) in place on the router's own int64 ids and weights (the kernels take any id and
weight dtype; weights are computed in fp32 and rounded once to the router's dtype, as the router itself
does), so no dtype copies are launched. Everything stays CUDA-graph safe (no host sync, shapes from shapes
only).

Which forward passes are decode steps is the caller's business (the transformers launcher decides it
per batch; a benchmark of decode steps applies it always).
"""

from __future__ import annotations

import torch

from kit_oea.oea import oea_reroute_


def reroute_router_output(
    router_logits: torch.Tensor,
    routing_weights: torch.Tensor,
    selected_experts: torch.Tensor,
    *,
    k0: int,
    norm_topk_prob: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The OEA form of one Qwen3-MoE router output (softmax scoring, no correction bias, no scaling)."""
    if router_logits.dim() != 2:
        raise ValueError(f"router_logits must be 2-D [M, E], got shape {tuple(router_logits.shape)}")
    k = selected_experts.shape[-1]
    if tuple(routing_weights.shape) != tuple(selected_experts.shape):
        raise ValueError(f"routing_weights {tuple(routing_weights.shape)} != selected_experts "
                         f"{tuple(selected_experts.shape)}")  # fmt: skip
    ids = selected_experts.reshape(-1, k)  # a view of the router's fresh output (a copy if it is not contiguous)
    weights = routing_weights.reshape(-1, k)
    oea_reroute_(
        ids,
        weights,
        router_logits,
        k0=k0,
        k=k,
        scoring_func="softmax",
        correction_bias=None,
        renormalize=norm_topk_prob,
        routed_scaling_factor=None,
        num_token_non_padded=None,
    )
    return router_logits, weights.reshape(routing_weights.shape), ids.reshape(selected_experts.shape)
