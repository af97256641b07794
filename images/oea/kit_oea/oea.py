"""Opportunistic Expert Activation (OEA, arXiv 2511.02237): the routing step kit patches into sglang.

Simplified OEA (the paper's Algorithm 1, k_max = k, maxP = N): every valid token keeps its top-``k0``
experts; the union of those over the valid tokens of the batch is the active set ``S``; every valid
token then takes its top-``k`` experts among ``S``; its weights are its router scores renormalised over
the chosen set. When ``|S| < k`` the missing slots hold the token's top-1 expert with weight 0 (never
``-1``: EPLB remap tables alias ``-1`` to their last entry). Invalid rows (padding, or rows the router
already masked to ``-1``) do not contribute to ``S`` and come out as ids ``-1``, weights 0. Ties are
broken by the lower expert index, exactly as ``kit.engine.routing.oea_route`` (numpy) does.

Two implementations of the in-place hook ``oea_reroute_``: fixed-shape torch ops (``reroute_torch_``, the
reference and the CPU path) and fused Triton kernels (``kit_oea.triton_oea``: one launch up to 512 logits,
two above), taken on CUDA when Triton imports (``KIT_OEA_IMPL`` overrides). Measured on one H200 under a CUDA
graph, GLM-5 shape (256 experts, top-8, k0=4): the torch ops add 78-124 us per MoE layer (batch 1-1024; the
plain routing step itself is 23-44 us), the fused kernels +3.0 to +6.5 us; on one H100 with their first kernel
prelaunched beside the router (``oea_prelaunch_``) and each row's top-k by ``tl.topk`` where a program holds
at most 512 logits, +1.9 to +4.8 us at every batch 1-1024 over three routers (docs/oea-hook.md).

Where the union of top-k0 already holds all but ``KIT_OEA_SKIP_SLACK`` experts (default ``n // 64``) the hook
keeps plain routing exactly (``skip_at``): decided on the device, so one captured graph serves both outcomes.

Everything here is CUDA-graph safe: shapes depend only on input shapes, there is no ``.item()``,
``.tolist()``, ``.cpu()``, boolean-mask indexing or host-to-device copy, and Python control flow depends
only on Python arguments. This module is copied into the OEA image and called from the patched
``select_experts()`` of sglang 0.5.23 (see ``apply.py``); it imports nothing but torch (and Triton lazily).
"""

from __future__ import annotations

import os
import re
from typing import Any

import torch

KNOB = "SGLANG_OEA_K0"
SKIP_KNOB = "KIT_OEA_SKIP_SLACK"
SUPPORTED_SCORING = ("softmax", "sigmoid")
# "auto" (default): the fused Triton kernels on CUDA when Triton imports, else torch ops; "torch": always the
# torch ops; "triton": on CUDA the kernels or an error (a way to make sure an OEA arm never runs the slow
# path). CPU tensors always take the torch ops. Read once at import.
IMPL_KNOB = "KIT_OEA_IMPL"
IMPL = os.environ.get(IMPL_KNOB, "auto").strip().lower() or "auto"
if IMPL not in ("auto", "torch", "triton"):
    raise ValueError(f"{IMPL_KNOB}={IMPL!r}: expected auto, torch or triton")
_triton: Any = None
_triton_error: str | None = None
# A knob's integer: ASCII digits only (Python's int() also takes '٣', '３', '1_0', '+2'), at most 9 of them.
_DIGITS = re.compile(r"[0-9]{1,9}")


def _score(logits: torch.Tensor, scoring_func: str) -> torch.Tensor:
    """Router probabilities in fp32 from raw router logits, as sglang's routers compute them."""
    x = logits.float()
    if scoring_func == "softmax":
        return torch.softmax(x, dim=-1)
    if scoring_func == "sigmoid":
        return torch.sigmoid(x)
    raise ValueError(f"kit OEA supports scoring_func in {SUPPORTED_SCORING}, got {scoring_func!r}")


def _select(
    rank: torch.Tensor, valid: torch.Tensor, k: int, k0: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Chosen expert ids ``[M, k]`` (int64, in rank order), ``keep`` ``[M, k]`` (slot holds a real choice) and
    the size of the union (a 0-d device tensor).

    ``rank`` ``[M, N]`` orders each row's experts (higher is better, ties to the lower index); ``valid``
    ``[M]`` says which rows join the union. Unkept slots hold the row's top-1 id; invalid rows have no
    kept slot (their ids are meaningless here and are overwritten by the caller).
    """
    m, n = rank.shape
    order = torch.sort(rank, dim=1, descending=True, stable=True).indices  # [M, N]
    # Phase 1: the union of every valid row's top-k0. Invalid rows go to a dummy bucket n.
    base = order[:, :k0].masked_fill(~valid[:, None], n)
    active = torch.zeros(n + 1, dtype=torch.bool, device=rank.device)
    active.index_fill_(0, base.reshape(-1), True)
    in_active = torch.take(active[:n], order)  # [M, N], in each row's rank order
    # Phase 2: each row's first k active experts in rank order. The key is distinct for every active
    # position (earlier = larger) and 0 elsewhere, so an integer top-k finds them without ties.
    earlier_first = torch.arange(n, 0, -1, dtype=torch.int32, device=rank.device).expand(m, n)
    key = earlier_first.masked_fill(~in_active, 0)
    top_key, pos = key.topk(k, dim=1)
    keep = (top_key > 0) & valid[:, None]
    ids = torch.where(keep, order.gather(1, pos), order[:, :1])
    return ids, keep, active[:n].sum()


def _weights(
    scores: torch.Tensor, ids: torch.Tensor, keep: torch.Tensor, *, renormalize: bool, scale: float | None
) -> torch.Tensor:
    """``scores[row, ids]`` on kept slots (0 elsewhere), renormalised per row and scaled, in fp32."""
    picked = scores.gather(1, ids).masked_fill(~keep, 0.0)
    if renormalize:
        total = picked.sum(dim=1, keepdim=True)
        picked = picked / total.masked_fill(total <= 0, 1.0)
    if scale is not None:
        picked = picked * scale
    return picked


def _check_k(n: int, k: int, k0: int) -> None:
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, E={n}], got {k}")
    if not 1 <= k0 <= k:
        raise ValueError(f"k0 must be in [1, k={k}], got {k0}")


def oea_route_torch(
    scores: torch.Tensor, k: int, k0: int, valid: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pure form, the torch twin of ``kit.engine.routing.oea_route``.

    ``scores`` ``[B, E]`` are router probabilities (ranked and renormalised as given); ``valid`` ``[B]``
    bool, all rows when None. Returns ids ``[B, k]`` int64 (``-1`` on invalid rows) and weights
    ``[B, k]`` float32.
    """
    if scores.dim() != 2:
        raise ValueError(f"scores must be 2-D [B, E], got shape {tuple(scores.shape)}")
    b, n = scores.shape
    _check_k(n, k, k0)
    s = scores.float()
    if valid is None:
        valid_rows = torch.ones(b, dtype=torch.bool, device=s.device)
    else:
        if tuple(valid.shape) != (b,):
            raise ValueError(f"valid must have shape ({b},), got {tuple(valid.shape)}")
        valid_rows = valid.to(device=s.device, dtype=torch.bool)
    ids, keep, _ = _select(s, valid_rows, k, k0)
    weights = _weights(s, ids, keep, renormalize=True, scale=None)
    return ids.masked_fill(~valid_rows[:, None], -1), weights


def _valid_rows(routed_ids: torch.Tensor, num_token_non_padded: torch.Tensor | None) -> torch.Tensor:
    """Rows that carry a real token: some incoming id is not -1, and the row is below the non-padded count."""
    valid = (routed_ids >= 0).any(dim=1)
    if num_token_non_padded is not None:
        rows = torch.arange(routed_ids.shape[0], device=routed_ids.device)
        valid = valid & (rows < num_token_non_padded.reshape(-1)[:1])
    return valid


def oea_reroute_(
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    router_logits: torch.Tensor,
    *,
    k0: int,
    k: int,
    scoring_func: str,
    correction_bias: torch.Tensor | None,
    renormalize: bool,
    routed_scaling_factor: float | None,
    num_token_non_padded: torch.Tensor | None,
    prelaunched: Any = None,
) -> None:
    """Rewrite sglang's top-k output in place with OEA (the hook in the patched ``select_experts()``).

    ``topk_ids`` ``[M, >=k]`` (int32 on CUDA) and ``topk_weights`` ``[M, >=k]`` (fp32): only the first
    ``k`` (routed) columns are rewritten; fused shared-expert columns after them are left untouched.
    ``router_logits`` ``[M, N]`` raw logits; scores are ``scoring_func`` of them. Experts are ranked by
    ``scores + correction_bias`` (noaux_tc, a ``[N]`` or ``[M, N]`` bias) and weighted by the unbiased
    scores, renormalised over the chosen set when ``renormalize``. Pass ``routed_scaling_factor`` only
    when the router folded it into the weights (sglang's ``is_routed_scaling_factor_fused_in_topk``).
    Rows at or past ``num_token_non_padded`` (a device scalar, None when sglang does not track padding)
    and rows whose incoming routed ids are all ``-1`` are left out of the union and end as ``-1``/0.

    The hook never costs more than it can save: where the union of the valid rows' top-``k0`` already holds
    all but at most ``KIT_OEA_SKIP_SLACK`` experts (see ``skip_at``), OEA could remove at most that many, and
    the routing is left exactly as plain top-k made it. That is decided on the device (a predicated kernel
    path; a ``torch.where`` on the torch path), never on the host.

    ``prelaunched``: what ``oea_prelaunch_`` returned for these logits before the router ran (or None); the
    fused path then joins it and launches only its second kernel; any other path joins it first.
    """
    try:
        m, n = router_logits.shape
        if topk_ids.dim() != 2 or topk_ids.shape[0] != m or topk_ids.shape[1] < k:
            raise ValueError(f"topk_ids must be [{m}, >={k}], got {tuple(topk_ids.shape)}")
        if tuple(topk_weights.shape) != tuple(topk_ids.shape):
            raise ValueError(f"topk_weights shape {tuple(topk_weights.shape)} != topk_ids {tuple(topk_ids.shape)}")
        _check_k(n, k, k0)
        if scoring_func not in SUPPORTED_SCORING:
            raise ValueError(f"kit OEA supports scoring_func in {SUPPORTED_SCORING}, got {scoring_func!r}")
        at = skip_at(n, k=k)
        fused = _fused_module(router_logits, topk_ids, topk_weights, correction_bias)
        if fused is None and prelaunched is not None:
            _load_triton().join(prelaunched)  # never leave the side stream unjoined (a captured graph would fail)
            prelaunched = None
        if fused is not None:
            fused.oea_reroute_triton_(
                topk_ids,
                topk_weights,
                router_logits,
                k0=k0,
                k=k,
                softmax=scoring_func == "softmax",
                correction_bias=correction_bias,
                renormalize=renormalize,
                routed_scaling_factor=routed_scaling_factor,
                num_token_non_padded=num_token_non_padded,
                skip_at=at,
                prelaunched=prelaunched,
            )
            return
        reroute_torch_(
            topk_ids,
            topk_weights,
            router_logits,
            k0=k0,
            k=k,
            scoring_func=scoring_func,
            correction_bias=correction_bias,
            renormalize=renormalize,
            routed_scaling_factor=routed_scaling_factor,
            num_token_non_padded=num_token_non_padded,
            skip_at=at,
        )
    except BaseException:
        if prelaunched is not None:  # never leave the side stream unjoined, whatever was refused
            _load_triton().join(prelaunched)
        raise

def oea_prelaunch_(
    router_logits: torch.Tensor,
    *,
    k0: int,
    k: int,
    scoring_func: str,
    correction_bias: torch.Tensor | None,
    num_token_non_padded: torch.Tensor | None,
) -> Any:
    """Called in the patched ``select_experts()`` before the router's top-k: where the fused path will take
    its two-kernel form, its first kernel (the union of every row's top-``k0``, which needs only the logits)
    starts now on a side stream, beside the router (``kit_oea.triton_oea.prelaunch_union``), so only the
    second kernel is left on the critical path after it. Returns the handle to pass to ``oea_reroute_``
    (which must then be called: it joins the side stream), or None where nothing was launched (CPU, the torch
    path, one-kernel batches, unsupported tensors). Checks nothing itself: ``oea_reroute_`` does."""
    if IMPL == "torch" or not router_logits.is_cuda or router_logits.dim() != 2:
        return None
    if scoring_func not in SUPPORTED_SCORING:
        return None
    fused = _load_triton()
    if fused is None or not 1 <= k0 <= k <= router_logits.shape[1]:
        return None
    softmax = scoring_func == "softmax"
    return fused.prelaunch_union(router_logits, k0=k0, k=k, softmax=softmax, correction_bias=correction_bias,
                                 num_token_non_padded=num_token_non_padded)  # fmt: skip


def reroute_torch_(
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    router_logits: torch.Tensor,
    *,
    k0: int,
    k: int,
    scoring_func: str,
    correction_bias: torch.Tensor | None,
    renormalize: bool,
    routed_scaling_factor: float | None,
    num_token_non_padded: torch.Tensor | None,
    skip_at: int | None = None,
) -> None:
    """The torch-ops form of ``oea_reroute_`` (the reference for the fused kernels, and the CPU path).

    ``skip_at``: when the union has that many experts or more, the routed columns are written back as they
    came (plain routing, bit for bit); None never skips. The choice is a ``torch.where`` on a 0-d device
    tensor: no host sync, the same ops either way (graph-capturable)."""
    scores = _score(router_logits, scoring_func)
    rank = scores if correction_bias is None else scores + correction_bias.float()
    plain_ids, plain_w = topk_ids[:, :k], topk_weights[:, :k]
    valid = _valid_rows(plain_ids, num_token_non_padded)
    ids, keep, size = _select(rank, valid, k, k0)
    weights = _weights(scores, ids, keep, renormalize=renormalize, scale=routed_scaling_factor)
    ids = ids.masked_fill(~valid[:, None], -1)
    if skip_at is not None:
        skip = size >= skip_at
        ids = torch.where(skip, plain_ids.to(ids.dtype), ids)
        weights = torch.where(skip, plain_w.to(weights.dtype), weights)
    plain_ids.copy_(ids)
    plain_w.copy_(weights)


def parse_skip_slack(raw: str) -> int | None:
    """``KIT_OEA_SKIP_SLACK``'s text: None for ``off``, -1 for unset (the default, ``n // 64``), else an int >= 0
    written in ASCII digits."""
    text = raw.strip()
    if text.lower() == "off":
        return None
    if not text:
        return -1
    if text.startswith("-") and _DIGITS.fullmatch(text[1:]):
        raise ValueError(f"{SKIP_KNOB}={raw!r} must be >= 0 (experts) or 'off'")
    if not _DIGITS.fullmatch(text):
        raise ValueError(f"{SKIP_KNOB}={raw!r} is not an integer >= 0 in ASCII digits (at most 9) or 'off'")
    return int(text)


def skip_at(n: int, raw: str | None = None, k: int | None = None) -> int | None:
    """The union size at or above which the hook keeps plain routing (None: never), from ``KIT_OEA_SKIP_SLACK``
    (``raw``, default the environment): the most experts OEA may save and still be skipped. Unset means
    ``n // 64`` (4 of GLM-5's 256 experts, 2 of Qwen3's 128); ``off`` never skips; 0 skips only where OEA
    cannot remove any expert (its union is every expert, so its output is plain top-k). With ``k`` (the experts
    one token routes) a threshold at or below k is refused: the union of any batch with one valid row already
    holds k0 experts, and one token's plain top-k holds k, so such a slack would keep plain routing on (nearly)
    every batch and the OEA arm would silently run the baseline."""
    slack = parse_skip_slack(os.environ.get(SKIP_KNOB, "") if raw is None else raw)
    if slack is None:
        return None
    if slack < 0:
        slack = n // 64
    if slack >= n:
        raise ValueError(f"{SKIP_KNOB}={slack} must be below the layer's {n} experts (or 'off')")
    if k is not None and n - slack <= k:
        raise ValueError(f"{SKIP_KNOB}={slack}: the skip threshold n - slack = {n - slack} is not above the {k} "
                         f"experts one token routes (n = {n}), so the hook would keep plain routing on (nearly) "
                         f"every batch and the OEA arm would run the baseline; use a slack below {n - k}, or 'off'")
    return n - slack


def layer_experts(topk_config: Any) -> int | None:
    """The layer's expert count where its ``TopKConfig`` shows it (the noaux_tc correction bias, ``[N]`` or
    ``[M, N]``), else None: sglang's TopK is built without it, and the first forward pass checks it then."""
    bias = getattr(topk_config, "correction_bias", None)
    shape = getattr(bias, "shape", None)
    return int(shape[-1]) if shape else None


def _load_triton() -> Any:
    """``kit_oea.triton_oea`` or None (remembering why), imported once."""
    global _triton, _triton_error
    if _triton is None and _triton_error is None:
        try:
            from kit_oea import triton_oea

            _triton = triton_oea
        except ImportError as exc:
            _triton_error = f"{type(exc).__name__}: {exc}"
    return _triton


def _fused_module(
    router_logits: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    correction_bias: torch.Tensor | None,
) -> Any:
    """The Triton module when the fused path applies (see ``IMPL``), else None."""
    if IMPL == "torch" or not router_logits.is_cuda:
        return None
    fused = _load_triton()
    if fused is not None and fused.supports(router_logits, topk_ids, topk_weights, correction_bias):
        return fused
    if IMPL == "triton":
        why = _triton_error or "unsupported tensors (see kit_oea.triton_oea.supports)"
        raise RuntimeError(f"{IMPL_KNOB}=triton but the fused OEA kernels cannot run: {why}")
    return None


def parse_k0(raw: str) -> int:
    """The ``SGLANG_OEA_K0`` value as an int; empty means 0. Strict, unlike sglang's ``EnvInt`` (which
    falls back to its default on a typo and would turn an OEA arm silently into the baseline)."""
    text = raw.strip()
    if not text:
        return 0
    if text.startswith("-") and _DIGITS.fullmatch(text[1:]):
        raise ValueError(f"{KNOB}={raw!r} must be >= 0 (0 = off, else the OEA k0)")
    if not _DIGITS.fullmatch(text):
        raise ValueError(f"{KNOB}={raw!r} is not an integer in ASCII digits (0 = off, else the OEA k0)")
    return int(text)


def layer_k0(topk_config: Any, raw: str | None = None) -> int:
    """Validate the OEA knob against one sglang ``TopKConfig``; return the k0 the layer will use (0 = off).

    ``raw`` is the knob's text (default: ``os.environ[SGLANG_OEA_K0]``). Called once per non-draft layer
    at model load by the patched ``TopK.__init__``, so an OEA arm whose model the hook cannot serve fails
    at startup instead of silently running the baseline.
    """
    k0 = parse_k0(os.environ.get(KNOB, "") if raw is None else raw)
    if k0 == 0:
        return 0
    layer = getattr(topk_config, "layer_id", None)
    k = int(topk_config.top_k) - int(topk_config.num_shared_topk_slots)
    where = f"{KNOB}={k0} (kit OEA patch), MoE layer {layer}"
    if k0 > k:
        raise ValueError(f"{where}: k0 must be in [1, {k}] (the layer routes {k} experts per token)")
    try:  # a typo, or a slack that would disable OEA, fails at startup, not in the first decode step
        n = layer_experts(topk_config)
        if n is None:
            parse_skip_slack(os.environ.get(SKIP_KNOB, ""))
        else:
            skip_at(n, k=k)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if topk_config.custom_routing_function is not None:
        raise ValueError(f"{where}: custom_routing_function routers are not supported")
    if topk_config.scoring_func not in SUPPORTED_SCORING or getattr(topk_config, "sqrtsoftplus_log1p", False):
        raise ValueError(f"{where}: scoring_func {topk_config.scoring_func!r} is not supported {SUPPORTED_SCORING}")
    groups = topk_config.num_expert_group
    if topk_config.use_grouped_topk and groups not in (None, 1) and topk_config.topk_group != groups:
        raise ValueError(
            f"{where}: grouped routing with topk_group={topk_config.topk_group} < num_expert_group={groups}"
            " is not supported (OEA's masked top-k ignores group limits)"
        )
    return k0
