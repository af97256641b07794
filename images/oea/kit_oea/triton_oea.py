"""The OEA hook as fused Triton kernels: one launch per MoE layer, no memset (``kit_oea.oea`` calls it on CUDA).

Contract: ``oea_reroute_triton_`` rewrites the routed columns of ``topk_ids`` / ``topk_weights`` in place,
exactly as ``kit_oea.oea.reroute_torch_`` (the reference) does; ``supports`` says which tensors it takes
(any id and weight dtype: int32/fp32 as sglang keeps them, int64/bf16 as transformers' router returns
them). Three paths, chosen per call by the batch size ``M``:

- **single** (default up to 4 rows): ONE program holds the batch as ``[BLOCK_M, BLOCK_N]`` tiles, builds
  the union of every valid row's top-``k0`` in registers, then picks every row's top-``k`` among it. No
  scratch memory, no state. Its cost grows with the batch.
- **fused** (default above): one program per ``BLOCK_M`` rows, at most one per SM, and ONE grid barrier.
  Each program marks its valid rows' top-``k0`` experts in a small persistent per-device buffer with the
  call's *generation* number (so the marks never need clearing), arrives at a counter, and waits until the
  last program to arrive has reset the counter and advanced the generation; then every expert whose mark
  equals this call's generation is in the union, and the program selects for its rows. The wait is bounded:
  a program that gives up (possible only when the grid's programs cannot all be resident at once, e.g.
  another kernel holding SMs) routes its rows as plain top-k and counts a timeout (``barrier_timeouts``),
  so it can never hang the GPU. Under CUDA-graph capture before the buffer exists, the split path runs.
- **split** (fallback, and for comparison): kernel A writes every row's top-``k0`` ids to a scratch
  ``[M, k0]`` buffer (fully overwritten, no memset); kernel B, one program per ``BLOCK_M`` rows, rebuilds
  the union from it with ``tl.histogram`` and selects. Two launches, stateless.

Per row, each expert's rank and index are packed into one int64 key (order-preserving float bits << 32 |
(BLOCK_N - 1 - index)), so one ``max`` finds the best expert with ties to the lower index; the i-th step
takes the largest key below the previous one; the chosen experts' weights are re-read from the logits with
one gather. An earlier version (a memset and two kernels, 7-14 us over plain top-k on one H200) is gone.

``KIT_OEA_PATH`` (``auto`` | ``single`` | ``fused`` | ``split``), ``KIT_OEA_SINGLE_MAX`` (largest batch for
the single path under ``auto``), ``KIT_OEA_MAX_PROGRAMS`` and ``KIT_OEA_MAX_SPIN`` (the fused grid's size
and its wait bound) are read per call, so benchmarks and tests can force each path. All launches are on
the current stream with grids from shapes only: CUDA-graph safe.
"""

# ruff: noqa: N803 (Triton constexpr parameters are upper case by convention)
from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

MAX_EXPERTS = 1024
PATH_KNOB = "KIT_OEA_PATH"
SINGLE_MAX_KNOB = "KIT_OEA_SINGLE_MAX"
# Measured on one H200 (benchmarks/results/h200-2026-12-01/oea_hook_overhead.md): single wins up to 4 rows.
DEFAULT_SINGLE_MAX = 4
_SINGLE_TILE = 8192  # elements of one [BLOCK_M, BLOCK_N] tile in the single-program path
_SPLIT_TILE = 2048  # the same for one program of the split path
_HIST_CHUNK = 1024  # scratch ids histogrammed per step by kernel B (256 for batches with <= 256 base ids)
_sm_count: dict[int, int] = {}
# The fused path's persistent state, one int32 buffer per device: [count, generation, timeouts, spare, marks...].
# It is consistent between launches (count 0, every mark at most the generation), so graph replays and eager
# calls may interleave; two launches must not run at the same time on one device (calls per layer are
# sequential on one stream). Made on the first eager call; a launch under graph capture before that takes
# the split path (a buffer made during capture would hold garbage until the graph is replayed).
_COUNT = tl.constexpr(0)
_GEN = tl.constexpr(1)
_TIMEOUTS = tl.constexpr(2)
_MARKS = tl.constexpr(4)
_state: dict[int, torch.Tensor] = {}
MAX_PROGRAMS_KNOB = "KIT_OEA_MAX_PROGRAMS"
SPIN_KNOB = "KIT_OEA_MAX_SPIN"
# A waiting program gives up after this many polls of the generation (about 0.1-0.5 s on an H200): it then
# routes its rows as plain top-k and counts a timeout. Only a launch whose programs are not all resident
# at once can wait that long (the grid is at most one program per SM, so only another kernel's blocks can
# delay one); see ``barrier_timeouts``.
DEFAULT_MAX_SPIN = 1 << 20


@triton.jit
def _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask,
              BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTMAX: tl.constexpr):  # fmt: skip
    """Packed rank keys ``[BM, BN]`` (-(2**63 - 1) where masked) and the softmax max / denominator per row."""
    m2 = rmask[:, None] & nmask[None, :]
    x = tl.load(logits_ptr + rows[:, None] * stride_l + offs[None, :], mask=m2, other=float("-inf")).to(tl.float32)
    if SOFTMAX:
        mx = tl.max(x, axis=1)
        mx = tl.where(rmask, mx, 0.0)
        e = tl.exp(x - mx[:, None])
        e = tl.where(m2, e, 0.0)
        den = tl.sum(e, axis=1)
        den = tl.where(den > 0, den, 1.0)
        s = e / den[:, None]
    else:
        mx = tl.zeros_like(rmask.to(tl.float32))
        den = mx + 1.0
        s = 1.0 / (1.0 + tl.exp(-x))
    r = tl.where(m2, s, 0.0)
    if HAS_BIAS:
        r = r + tl.load(bias_ptr + offs, mask=nmask, other=0.0).to(tl.float32)[None, :]
    bits = r.to(tl.int32, bitcast=True)
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # signed-int order == float order
    low = (BLOCK_N - 1 - offs).to(tl.int64)  # larger for the lower index: ties go to the lower index
    key = (ordered.to(tl.int64) << 32) | low[None, :]
    key = tl.where(m2, key, -9223372036854775807)
    return key, mx, den


@triton.jit
def _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K: tl.constexpr, BLOCK_K: tl.constexpr,
                HAS_NTNP: tl.constexpr):  # fmt: skip
    """Rows that carry a token: in range, some incoming routed id >= 0, below num_token_non_padded."""
    koffs = tl.arange(0, BLOCK_K)
    m2 = rmask[:, None] & (koffs[None, :] < K)
    ids = tl.load(ids_ptr + rows[:, None] * stride_i + koffs[None, :], mask=m2, other=-1)
    valid = (tl.max((ids >= 0).to(tl.int32), axis=1) > 0) & rmask
    if HAS_NTNP:
        valid = valid & (rows < tl.load(ntnp_ptr))
    return valid


@triton.jit
def _next_key(key, prev):
    """Per row, the largest key strictly below ``prev`` (keys are distinct within a row)."""
    return tl.max(tl.where(key < prev[:, None], key, -9223372036854775807), axis=1)


@triton.jit
def _key_index(best, BLOCK_N: tl.constexpr):
    return (BLOCK_N - 1) - (best & 0x7FFFFFFF).to(tl.int32)


@triton.jit
def _select_store(
    key, mx, den, active, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i, w_ptr, stride_w, scale,
    K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SOFTMAX: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):  # fmt: skip
    """Every row's top-k among ``active`` (fillers: its top-1, weight 0), weights, written in place."""
    koffs = tl.arange(0, BLOCK_K)
    top1 = _key_index(tl.max(key, axis=1), BLOCK_N)
    akey = tl.where(active[None, :], key, -9223372036854775807)
    out_ids = tl.zeros([key.shape[0], BLOCK_K], dtype=tl.int32) + top1[:, None]
    take = tl.zeros([key.shape[0], BLOCK_K], dtype=tl.int1)
    prev = tl.zeros_like(top1).to(tl.int64) + 9223372036854775807
    for j in tl.static_range(K):
        best = _next_key(akey, prev)
        ok = best > -9223372036854775807
        here = (koffs[None, :] == j) & ok[:, None]
        out_ids = tl.where(here, _key_index(best, BLOCK_N)[:, None], out_ids)
        take = take | here
        prev = best
    kmask = rmask[:, None] & (koffs[None, :] < K)
    x = tl.load(logits_ptr + rows[:, None] * stride_l + out_ids, mask=kmask, other=0.0).to(tl.float32)
    if SOFTMAX:  # noqa: SIM108 (a constexpr branch, not a value choice)
        s = tl.exp(x - mx[:, None]) / den[:, None]
    else:
        s = 1.0 / (1.0 + tl.exp(-x))
    w = tl.where(take, s, 0.0)
    if RENORMALIZE:
        total = tl.sum(w, axis=1)
        w = w / tl.where(total > 0, total, 1.0)[:, None]
    w = w * scale
    out_ids = tl.where(valid[:, None], out_ids, -1)
    w = tl.where(valid[:, None], w, 0.0)
    tl.store(ids_ptr + rows[:, None] * stride_i + koffs[None, :], out_ids.to(ids_ptr.dtype.element_ty), mask=kmask)
    tl.store(w_ptr + rows[:, None] * stride_w + koffs[None, :], w.to(w_ptr.dtype.element_ty), mask=kmask)


@triton.jit
def _single_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, ntnp_ptr, M, N, scale,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr, RENORMALIZE: tl.constexpr,
):  # fmt: skip
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    active = tl.zeros([BLOCK_N], dtype=tl.int32)
    for start in range(0, M, BLOCK_M):  # phase 1: the union, in registers
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < M
        key, _, _ = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
        valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
        kth = tl.max(key, axis=1)
        for _ in tl.static_range(K0 - 1):
            kth = _next_key(key, kth)
        chosen = (key >= kth[:, None]) & valid[:, None] & nmask[None, :]
        active = tl.maximum(active, tl.max(chosen.to(tl.int32), axis=0))
    for start in range(0, M, BLOCK_M):  # phase 2: each row's top-k among the union
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < M
        key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
        valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
        _select_store(key, mx, den, active > 0, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i, w_ptr,
                      stride_w, scale, K, BLOCK_N, BLOCK_K, SOFTMAX, RENORMALIZE)  # fmt: skip


@triton.jit
def _base_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, ntnp_ptr, base_ptr, M, N,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_K0: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
):  # fmt: skip
    """Split path, kernel A: ``base[row, :K0]`` = the row's top-k0 ids, or -1 for a row without a token."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    key, _, _ = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, offs < N, BLOCK_N, HAS_BIAS, SOFTMAX)
    valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
    c = tl.arange(0, BLOCK_K0)
    out = tl.zeros([BLOCK_M, BLOCK_K0], dtype=tl.int32) - 1
    best = tl.max(key, axis=1)
    for j in tl.static_range(K0):
        if j > 0:
            best = _next_key(key, best)
        out = tl.where(c[None, :] == j, _key_index(best, BLOCK_N)[:, None], out)
    out = tl.where(valid[:, None], out, -1)
    tl.store(base_ptr + rows[:, None] * K0 + c[None, :], out, mask=rmask[:, None] & (c[None, :] < K0))


@triton.jit
def _split_select_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, ntnp_ptr, base_ptr, M, N, scale,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    CHUNK: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):  # fmt: skip
    """Split path, kernel B: the union from every row's base ids, then this program's rows' selection."""
    total = M * K0
    hist = tl.zeros([BLOCK_N], dtype=tl.int32)
    for start in range(0, total, CHUNK):
        j = start + tl.arange(0, CHUNK)
        base = tl.load(base_ptr + j, mask=j < total, other=-1)
        hist += tl.histogram(tl.maximum(base, 0), BLOCK_N, mask=base >= 0)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
    valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
    _select_store(key, mx, den, (hist > 0) & nmask, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i,
                  w_ptr, stride_w, scale, K, BLOCK_N, BLOCK_K, SOFTMAX, RENORMALIZE)  # fmt: skip


@triton.jit
def _fused_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, ntnp_ptr, state_ptr, M, N, scale,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr, RENORMALIZE: tl.constexpr,
    MAX_SPIN: tl.constexpr,
):  # fmt: skip
    """Fused path: one launch, one grid barrier. Each program marks its valid rows' top-k0 experts in the
    persistent state with this call's generation, waits until every program has arrived, then selects."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
    valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
    kth = tl.max(key, axis=1)
    for _ in tl.static_range(K0 - 1):
        kth = _next_key(key, kth)
    chosen = (key >= kth[:, None]) & valid[:, None] & nmask[None, :]
    local = tl.max(chosen.to(tl.int32), axis=0) > 0
    gen = tl.atomic_add(state_ptr + _GEN, 0)  # this call's generation: every program reads the same one
    mark = gen + 1
    tl.store(state_ptr + _MARKS + offs, tl.zeros([BLOCK_N], dtype=tl.int32) + mark, mask=local)
    tl.debug_barrier()  # the whole program's marks are written before its arrival (release) below
    arrived = tl.atomic_add(state_ptr + _COUNT, 1)
    gave_up = tl.full([], 0, tl.int32)
    if arrived == tl.num_programs(0) - 1:  # the last to arrive resets the count and opens the next generation
        tl.atomic_xchg(state_ptr + _COUNT, 0)
        tl.atomic_add(state_ptr + _GEN, 1)
    else:
        now = tl.atomic_add(state_ptr + _GEN, 0)
        spins = tl.full([], 0, tl.int32)
        while (now == gen) & (spins < MAX_SPIN):
            now = tl.atomic_add(state_ptr + _GEN, 0)
            spins += 1
        if now == gen:
            gave_up = tl.full([], 1, tl.int32)
            tl.atomic_add(state_ptr + _TIMEOUTS, 1)
    tl.debug_barrier()
    marks = tl.load(state_ptr + _MARKS + offs, mask=nmask, other=0, volatile=True)
    # A program that gave up waiting routes its rows as plain top-k (every expert active): never a hang.
    active = ((marks == mark) | local | (gave_up != 0)) & nmask
    _select_store(key, mx, den, active, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i, w_ptr,
                  stride_w, scale, K, BLOCK_N, BLOCK_K, SOFTMAX, RENORMALIZE)  # fmt: skip


def supports(
    router_logits: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor,
    correction_bias: torch.Tensor | None,
) -> bool:
    """Unit stride along experts and slots, no bias or a contiguous [N] one, N <= MAX_EXPERTS. Any id /
    weight dtype (int32 or int64 ids, fp32 or bf16 weights) is accepted."""
    return (
        router_logits.is_cuda
        and router_logits.shape[1] <= MAX_EXPERTS
        and router_logits.stride(1) == 1
        and topk_ids.stride(1) == 1
        and topk_weights.stride(1) == 1
        and (correction_bias is None or (correction_bias.dim() == 1 and correction_bias.is_contiguous()))
    )


def choose_path(m: int) -> str:
    """``single``, ``split`` or ``fused`` for a batch of ``m`` rows (``KIT_OEA_PATH``, ``KIT_OEA_SINGLE_MAX``):
    under ``auto``, ``single`` up to the threshold and ``fused`` above it."""
    path = os.environ.get(PATH_KNOB, "auto").strip().lower() or "auto"
    if path not in ("auto", "single", "split", "fused"):
        raise ValueError(f"{PATH_KNOB}={path!r}: expected auto, single, split or fused")
    if path != "auto":
        return path
    raw = os.environ.get(SINGLE_MAX_KNOB, "").strip()
    single_max = int(raw) if raw else DEFAULT_SINGLE_MAX
    return "single" if m <= single_max else "fused"


def _device_key(device: torch.device) -> str:
    if device.type != "cuda":
        return device.type
    return f"cuda:{device.index if device.index is not None else torch.cuda.current_device()}"


def _fused_state(device: torch.device) -> torch.Tensor | None:
    """The device's barrier state, made on first use outside graph capture; None while capturing before that."""
    key = _device_key(device)
    state = _state.get(key)
    if state is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        state = torch.zeros(int(_MARKS) + MAX_EXPERTS, dtype=torch.int32, device=device)
        _state[key] = state
    return state


def barrier_timeouts(device: torch.device) -> int:
    """How many programs of fused launches on ``device`` gave up waiting so far (0 unless something kept a
    launch's programs from being resident together). Reads the device: not for a captured region."""
    state = _state.get(_device_key(device))
    return 0 if state is None else int(state[int(_TIMEOUTS)].item())


def _int_knob(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    value = int(raw) if raw else default
    if value < 1:
        raise ValueError(f"{name}={raw!r}: expected an integer >= 1")
    return value


def _sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 132
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_count:
        _sm_count[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_count[index]


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
    if m == 0:
        return
    block_n, block_k = max(triton.next_power_of_2(n), 32), triton.next_power_of_2(k)
    dummy = router_logits  # never read when the matching HAS_* flag is off
    bias = correction_bias if correction_bias is not None else dummy
    ntnp = num_token_non_padded if num_token_non_padded is not None else dummy
    flags = {"HAS_BIAS": correction_bias is not None, "HAS_NTNP": num_token_non_padded is not None, "SOFTMAX": softmax}
    scale = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    stride_l, stride_i, stride_w = router_logits.stride(0), topk_ids.stride(0), topk_weights.stride(0)
    path = choose_path(m)
    state = _fused_state(router_logits.device) if path == "fused" else None
    if path == "fused" and state is not None:
        max_programs = _int_knob(MAX_PROGRAMS_KNOB, _sms(router_logits.device))
        block_m = triton.next_power_of_2(triton.cdiv(m, max_programs))
        _fused_kernel[(triton.cdiv(m, block_m),)](
            router_logits, stride_l, bias, topk_ids, stride_i, topk_weights, stride_w, ntnp, state, m, n, scale,
            K=k, K0=k0, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, RENORMALIZE=renormalize,
            MAX_SPIN=_int_knob(SPIN_KNOB, DEFAULT_MAX_SPIN), num_warps=4 if block_m * block_n <= 2048 else 8,
            **flags,
        )  # fmt: skip
        return
    if path == "single":
        block_m = min(triton.next_power_of_2(m), max(1, _SINGLE_TILE // block_n))
        _single_kernel[(1,)](
            router_logits, stride_l, bias, topk_ids, stride_i, topk_weights, stride_w, ntnp, m, n, scale,
            K=k, K0=k0, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, RENORMALIZE=renormalize,
            num_warps=8 if block_m * block_n >= 4096 else 4, **flags,
        )  # fmt: skip
        return
    base = torch.empty(m * k0, dtype=torch.int32, device=router_logits.device)
    per_program = triton.next_power_of_2(triton.cdiv(m, _sms(router_logits.device)))
    block_m = min(per_program, max(1, _SPLIT_TILE // block_n))
    grid = (triton.cdiv(m, block_m),)
    _base_kernel[grid](
        router_logits, stride_l, bias, topk_ids, stride_i, ntnp, base, m, n,
        K=k, K0=k0, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, BLOCK_K0=triton.next_power_of_2(k0),
        num_warps=4, **flags,
    )  # fmt: skip
    _split_select_kernel[grid](
        router_logits, stride_l, bias, topk_ids, stride_i, topk_weights, stride_w, ntnp, base, m, n, scale,
        K=k, K0=k0, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        CHUNK=_HIST_CHUNK if m * k0 > 256 else 256, RENORMALIZE=renormalize, num_warps=4, **flags,
    )  # fmt: skip
