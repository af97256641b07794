"""The OEA hook as fused Triton kernels: one or two launches per MoE layer, no memset (``kit_oea.oea`` calls it).

Contract: ``oea_reroute_triton_`` rewrites the routed columns of ``topk_ids`` / ``topk_weights`` in place,
exactly as ``kit_oea.oea.reroute_torch_`` (the reference) does, the skip rule included; ``supports`` says
which tensors it takes (any id and weight dtype: int32/fp32 as sglang keeps them, int64/bf16 as transformers'
router returns them), for ANY incoming ids: like the reference, the result depends on them only through
their -1 masking. The forcible split-hint kernels use the incoming ids as a hint, never as a contract: where
every valid row of a program hands over its plain top-k under the same key (score + bias, ties to the lower
index: K distinct experts with exactly K-1 of the row's keys above the lowest of them, checked per row
against the full row), they work from it; a program with any other valid row (a router that broke a
k-th-place tie otherwise, a repeated id, a row partly -1, an id past the experts, ids that are no top-k at
all) takes the full-row computation, in each kernel separately. (f1bdee1's light kernel A trusted the ids
unchecked: 15 GPU tests that feed random ids failed on an H200, and the interpreter gives the same wrong
rows on those inputs; benchmarks/results/h200-hookfast-2026-12-03/.) Paths, chosen per call from the shapes
(never from the data):

- **single** (default up to 512 logits: 4 rows of 128 experts, 2 of 256): ONE program holds the batch as
  ``[BLOCK_M, BLOCK_N]`` tiles, builds the union of every valid row's top-``k0`` in registers, then picks
  every row's top-``k`` among it. No scratch memory, no state. Its cost grows with the batch.
- **split** (default above): kernel A, one program per ``BLOCK_M`` rows, writes the union of its rows'
  top-``k0`` as a bit set (``BLOCK_N / 32`` int32 words per program, fully overwritten: no memset); kernel
  B, the same programs, ORs those bit sets (a few hundred words, where the histogram of every row's base ids
  it replaced cost +12.7 us at GLM-5's 1024 rows) and selects. Two launches, stateless.
  The split path's default (``split``) is these full-row kernels: A takes each row's top-k0 in K0-1 max
  rounds over the row, B takes each row's top-k within the union in K full-row max rounds. ``split-hint``
  (light kernel A ``_light_part_kernel`` + repair kernel B ``_repair_select_kernel``) works from the incoming
  ids as a checked hint: A ranks the full row's keys once to check the hint (one compare-and-count), then only
  the row's K incoming ids for its top-k0; B keeps every plain id in the union and fills only the k - c other
  slots (a loop bounded on the device by the program's largest k - c). Either falls back per program where
  the hint fails (``_plain_top_k_broken``). ``split-light`` is light A + the full-row B. Compiled on an H100
  (benchmarks/results/h100-hook-2026-12-05/) the hint kernels are exact (the GPU tests pass) but cost up to
  1.2 us more than the full-row ones, so they are forcible only.
- **prelaunched split** (the default from 2 rows when the caller prelaunches, as kit's sglang patch does):
  ``prelaunch_union`` starts kernel A on a side stream before the router's top-k (it needs only the logits,
  and counts every row below num_token_non_padded); ``oea_reroute_triton_(prelaunched=...)`` joins it and
  runs kernel B alone, which checks the ids first (a row below num_token_non_padded whose first id is -1 makes
  it rebuild the union from every row, as the reference). One launch on the critical path. Where
  ``_union_layout`` says so (GLM-5 near 64 and 256 rows, Qwen3 near 64), kernel A's programs OR into one set
  instead of a bit set each (the atomic union), and B reads that one set; kernel A's grid is its own either
  way (``_a_layout``); kernel B is launched with PDL (``_b_pdl``) and, where its programs hold at most 512
  logits, finds each row's top-k with ``tl.topk`` (``_select_topk``). On one H100
  (benchmarks/results/h100-hooktopk-2026-12-06/, docs/oea-hook.md) the hook costs +1.9 to +4.8 us over
  plain routing at every batch 1-1024 of both shapes over three routers (torch ops, torch.topk, one fused
  kernel), in two runs.
- **repl** (forced only): one launch, every program rebuilds the union from all rows (as single does) and
  selects for one row. Measured slower than split from 4 rows up; kept for measurement.

**The skip.** Both paths count the union (a popcount of the bit set, or the sum of the in-register mask)
and, when it holds ``skip_at`` experts or more, store nothing: plain routing stays bit for bit. That is a
branch on a value each program computes itself on the device; the host passes the same grid and arguments
either way, so one captured CUDA graph serves both outcomes.

**PDL** (programmatic dependent launch, sm90+): the kernels are launched with
``CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION``; kernel A releases kernel B at its start, and B
reads and ranks its rows' logits (written before A) while A runs, then ``griddepcontrol.wait``s before it
reads A's bit sets or the routed ids. Every kernel waits before its first read of anything the kernel before
it may have written. Measured: about 0.7 us less on the split path (0.1 us on single).

Measured on one H200 under a CUDA graph (benchmarks/results/h200-hook-2026-12-03/, the old split path): over
plain routing, +3.0 to +5.5 us for Qwen3's shape at every batch 1-1024 and GLM-5's up to 64 rows, GLM-5 +6.0 /
+6.5 us at 128 / 256 rows (where it reroutes) and +5.0 / +6.2 us at 512 / 1024 rows where it skips (+7.1 /
+9.2 us where it must reroute there). The floor of any two-launch path is about 5 us (the second dependent
launch costs about 2 us even with PDL). A one-launch path with a grid barrier was built and measured correct
but slower (+6.3 to +7.6 us, commit 7f16e21).

Per row, each expert's rank and index are packed into one int64 key (order-preserving float bits << 32 |
(BLOCK_N - 1 - index)), so one ``max`` finds the best expert with ties to the lower index; the i-th step
takes the largest key below the previous one (or one ``tl.topk`` takes the k largest, ``_select_topk``); the
chosen experts' weights are re-read from the logits with one gather.

Knobs, read per call so that benchmarks and tests can force each choice: ``KIT_OEA_PATH`` (``auto`` |
``single`` | ``repl`` | ``split`` | ``split-hint`` | ``split-light``), ``KIT_OEA_SINGLE_MAX`` (largest batch
for single under ``auto``; default from the 512-logit rule), ``KIT_OEA_REPL_MAX`` (default 0), ``KIT_OEA_PDL``
(``auto`` | ``1`` | ``0``), ``KIT_OEA_SPLIT_WARPS``, ``KIT_OEA_SPLIT_ROWS``, ``KIT_OEA_SINGLE_WARPS``,
``KIT_OEA_UNION``, for the prelaunched kernel A alone ``KIT_OEA_A_ROWS`` / ``KIT_OEA_A_WARPS``,
``KIT_OEA_B_PDL`` (the prelaunched kernel B with PDL: ``_b_pdl``) and ``KIT_OEA_SELECT`` (``auto`` | ``rounds``
| ``topk``: how each row's top-k in the union is found, ``_select_topk``). All launches are on the current stream
with grids from shapes only: CUDA-graph safe.
"""

# ruff: noqa: N803 (Triton constexpr parameters are upper case by convention)
from __future__ import annotations

import contextlib
import math
import os
from typing import Any, NamedTuple

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

MAX_EXPERTS = 1024
PATHS = ("single", "repl", "split", "split-hint", "split-light")
PATH_KNOB = "KIT_OEA_PATH"
SINGLE_MAX_KNOB = "KIT_OEA_SINGLE_MAX"
REPL_MAX_KNOB = "KIT_OEA_REPL_MAX"
PDL_KNOB = "KIT_OEA_PDL"
WARPS_KNOB = "KIT_OEA_SPLIT_WARPS"  # warps per program of the split kernels (benchmarks; default _split_warps)
SINGLE_WARPS_KNOB = "KIT_OEA_SINGLE_WARPS"  # warps of the single / repl program (benchmarks; default 4 or 8)
PRELAUNCH_KNOB = "KIT_OEA_PRELAUNCH"  # 1 (default): kernel A beside the router's top-k (prelaunch_union); 0: after
PRELAUNCH_MIN_KNOB = "KIT_OEA_PRELAUNCH_MIN"  # smallest batch whose kernel A is prelaunched (split) under auto
B_PDL_KNOB = "KIT_OEA_B_PDL"  # 1 (default): the prelaunched kernel B launched with PDL after the router (_b_pdl)
DEFAULT_PRELAUNCH_MIN = 2
_ONE_PASS_ROWS = 1024  # (a power of 2) largest batch whose prelaunched kernel B reads every first id in one block
# (a power of 2) most of kernel A's bit sets kernel B ORs in one block (more: in blocks of this many, and the
# prelaunched B no longer requests everything first: GLM-5 from 513 rows, whose kernel A has two rows a program)
_ONE_PASS_SETS = 256
UNION_KNOB = "KIT_OEA_UNION"  # auto | sets | atomic: how prelaunched kernel A hands its union to B (_union_layout)
ROWS_KNOB = "KIT_OEA_SPLIT_ROWS"  # rows per program of the split kernels (benchmarks; a power of 2 <= the tile)
# the prelaunched kernel A alone (its grid is its own: B reads all its sets, or the one set): rows per program,
# warps (benchmarks; default _a_layout)
A_ROWS_KNOB = "KIT_OEA_A_ROWS"
A_WARPS_KNOB = "KIT_OEA_A_WARPS"
# how kernel B (and single / repl) picks each row's top-k in the union: auto (default), rounds (K rounds of a max
# over the row's keys) or topk (Triton's bitonic tl.topk over the same keys, as sglang 0.5.23's Triton router
# does): _select_topk
SELECT_KNOB = "KIT_OEA_SELECT"
# Measured on one H200 (benchmarks/results/h200-hook-2026-12-03/): single wins up to 512 logits (4 rows of
# Qwen3's 128 experts, 2 of GLM-5's 256), split above; repl never won by more than noise (forcible, off).
DEFAULT_SINGLE_ELEMENTS = 512
DEFAULT_REPL_MAX = 0
_SINGLE_TILE = 8192  # elements of one [BLOCK_M, BLOCK_N] tile in the single-program path
_SPLIT_TILE = 2048  # the same for one program of the split path
_REPL_ROWS = 1  # rows each program of the repl path selects for
_sm_count: dict[int, int] = {}
_side_streams: dict[int, Any] = {}  # device index -> the side stream prelaunched kernels run on
_capability: dict[int, int] = {}


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
                HAS_NTNP: tl.constexpr, USE_IDS: tl.constexpr = True):  # fmt: skip
    """Rows that carry a token: in range, some incoming routed id >= 0, below num_token_non_padded. Without
    ``USE_IDS`` (a prelaunched kernel A: the ids do not exist yet) every in-range row below it."""
    valid = rmask
    if USE_IDS:
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
    RENORMALIZE: tl.constexpr, TOPK: tl.constexpr = False,
):  # fmt: skip
    """Every row's top-k among ``active`` (fillers: its top-1, weight 0), weights, written in place. ``TOPK``:
    the k best keys by one ``tl.topk`` (a bitonic top-k over the row, sorted, best first; the keys are distinct
    within a row, so the same experts in the same order), else K rounds of a max below the previous best."""
    koffs = tl.arange(0, BLOCK_K)
    top1 = _key_index(tl.max(key, axis=1), BLOCK_N)
    akey = tl.where(active[None, :], key, -9223372036854775807)
    if TOPK:
        won = tl.topk(akey, BLOCK_K)  # [BM, BLOCK_K], descending; BLOCK_K (a power of 2) >= K
        take = (won > -9223372036854775807) & (koffs[None, :] < K)
        out_ids = tl.where(take, _key_index(won, BLOCK_N), top1[:, None])
    else:
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
    _store_routed(out_ids, take, mx, den, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i, w_ptr,
                  stride_w, scale, K, BLOCK_K, SOFTMAX, RENORMALIZE)  # fmt: skip


@triton.jit
def _store_routed(
    out_ids, take, mx, den, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i, w_ptr, stride_w, scale,
    K: tl.constexpr, BLOCK_K: tl.constexpr, SOFTMAX: tl.constexpr, RENORMALIZE: tl.constexpr,
):  # fmt: skip
    """The chosen ``[BM, BK]`` ids (``take``: a real choice, else a weight-0 filler), their weights re-read
    from the logits, renormalised and scaled, written in place (invalid rows: -1, weight 0)."""
    koffs = tl.arange(0, BLOCK_K)
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
def _or(a, b):
    return a | b


@triton.jit
def _union_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, ntnp_ptr, M, N, scale, skip_at, R,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_M2: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
    RENORMALIZE: tl.constexpr, USE_PDL: tl.constexpr, TOPK: tl.constexpr = False,
):  # fmt: skip
    """single (one program, ``R`` = M) and repl (one program per ``R`` = BLOCK_M2 rows): the union of every
    valid row's top-k0 in registers (BLOCK_M rows at a time), its size, then, unless the union has >= skip_at
    experts (plain routing is then left as it is), the selection for this program's R rows."""
    if USE_PDL:
        gdc_wait()
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
    if tl.sum(active) < skip_at:  # the skip decision, on the device: plain routing is left as it is
        lo = tl.program_id(0) * R
        for start in range(lo, lo + R, BLOCK_M2):
            rows = start + tl.arange(0, BLOCK_M2)
            rmask = rows < M
            key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS,
                                     SOFTMAX)  # fmt: skip
            valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
            _select_store(key, mx, den, active > 0, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i,
                          w_ptr, stride_w, scale, K, BLOCK_N, BLOCK_K, SOFTMAX, RENORMALIZE, TOPK)  # fmt: skip


@triton.jit
def _full_top_k0_words(key, valid, nmask, K0: tl.constexpr, WORDS: tl.constexpr):
    """The bit set (WORDS int32 words) of the union of the valid rows' top-k0, from their full-row keys:
    K0-1 rounds of a max over each row."""
    kth = tl.max(key, axis=1)
    for _ in tl.static_range(K0 - 1):
        kth = _next_key(key, kth)
    chosen = (key >= kth[:, None]) & valid[:, None] & nmask[None, :]
    mine = tl.max(chosen.to(tl.int32), axis=0)  # [BLOCK_N] 0/1
    bits = tl.reshape(mine, [WORDS, 32]) << tl.arange(0, 32)[None, :]
    return tl.reduce(bits, 1, _or)


@triton.jit
def _union_words(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, ntnp_ptr, M, N, K: tl.constexpr, K0: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WORDS: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
):  # fmt: skip
    """The bit set of the union of every valid row's top-k0, built by one program from all M rows."""
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    acc = tl.zeros([WORDS], dtype=tl.int32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        rmask = rows < M
        key, _, _ = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
        valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
        acc = acc | _full_top_k0_words(key, valid, nmask, K0, WORDS)
    return acc


@triton.jit
def _part_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, ntnp_ptr, part_ptr, M, N,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    WORDS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
    USE_PDL: tl.constexpr, USE_IDS: tl.constexpr = True, ATOMIC: tl.constexpr = False, union_ptr=None,
):  # fmt: skip
    """Split path, kernel A: ``part[program]`` = the union of this program's valid rows' top-k0, as a bit set
    of WORDS int32 words (expert e is bit e % 32 of word e // 32). Every program writes its words: no memset.
    Prelaunched (``USE_IDS`` off: launched on a side stream before the router's top-k made the ids) it counts
    every row below num_token_non_padded; kernel B then checks the ids before it trusts that union.
    ``ATOMIC`` (prelaunched, where ``_union_layout`` picks the atomic union): instead, every program ORs its
    words into the one set at ``union_ptr`` (zeroed before, on the same stream), so kernel B reads WORDS words,
    not P sets."""
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()  # kernel B may start now; it waits for this grid before reading part
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    key, _, _ = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
    valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP, USE_IDS)
    words = _full_top_k0_words(key, valid, nmask, K0, WORDS)
    if ATOMIC:
        tl.atomic_or(union_ptr + tl.arange(0, WORDS), words, sem="relaxed")
    else:
        tl.store(part_ptr + tl.program_id(0) * WORDS + tl.arange(0, WORDS), words)


@triton.jit
def _incoming(ids_ptr, stride_i, rows, rmask, N, K: tl.constexpr, BLOCK_K: tl.constexpr):
    """The ``[BM, BK]`` incoming routed ids as int32 (0 where not ``ok``) and ``ok``: a slot below K holding
    an id in [0, N). Compared in the ids' own dtype first (an int64 id is never truncated into range)."""
    koffs = tl.arange(0, BLOCK_K)
    km = rmask[:, None] & (koffs[None, :] < K)
    raw = tl.load(ids_ptr + rows[:, None] * stride_i + koffs[None, :], mask=km, other=-1)
    ok = km & (raw >= 0) & (raw < N)
    return tl.where(ok, raw, 0).to(tl.int32), ok


@triton.jit
def _plain_top_k_broken(key, pkey, ok, valid, K: tl.constexpr):
    """Per row, whether the incoming ids break the plain-top-k hint the fast kernels use: a valid row's K
    slots must hold K distinct experts that are exactly its K best keys (the same packed keys, ties to the
    lower index). ``key``: the row's full ``[BM, BN]`` keys; ``pkey``: the ``[BM, BK]`` keys of its incoming
    ids (``ok`` slots). Also returns each incoming id's rank among them (``larger``: how many rank above) and
    the lowest incoming key. One compare-and-count over the row; the rest is ``[BM, BK, BK]``. (The count of
    ``ok`` slots is implied by the rank sum for K >= 2, not for K = 1: a lone id past the experts.)"""
    larger = tl.sum((pkey[:, None, :] > pkey[:, :, None]).to(tl.int32), axis=2)  # [BM, BK]: keys above each
    n_ok = tl.sum(ok.to(tl.int32), axis=1)
    # With K ok slots, the K ranks sum to K(K-1)/2 exactly when no two slots hold the same expert.
    distinct = tl.sum(tl.where(ok, larger, 0), axis=1) == (K * (K - 1)) // 2
    low = tl.min(tl.where(ok, pkey, 9223372036854775807), axis=1)
    above = tl.sum((key > low[:, None]).to(tl.int32), axis=1)
    broken = valid & ((n_ok != K) | (~distinct) | (above != K - 1))
    return broken, larger, low


@triton.jit
def _light_part_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, ntnp_ptr, part_ptr, M, N,
    K: tl.constexpr, K0: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    WORDS: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
    USE_PDL: tl.constexpr,
):  # fmt: skip
    """Split path, light kernel A: the same bit set as ``_part_kernel``. Where every valid row of the program
    hands over its plain top-k (checked per row against the full row: ``_plain_top_k_broken``), a row's
    top-k0 is the top-k0 of its K incoming ids, ranked pairwise, instead of K0-1 max rounds over the row;
    otherwise (a router that broke a tie otherwise, ids that are not a top-k at all, a repeated id, a row
    partly -1) the program takes ``_part_kernel``'s full-row rounds. Either way the reference's union.
    Also writes ``part[P * WORDS + program]`` = 1 where it took the full rounds, else 0 (read by tests)."""
    if USE_PDL:
        gdc_wait()
        gdc_launch_dependents()  # kernel B may start now; it waits for this grid before reading part
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
    valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
    ids, ok = _incoming(ids_ptr, stride_i, rows, rmask, N, K, BLOCK_K)
    pkey = _gathered_keys(logits_ptr, stride_l, bias_ptr, rows, ids, ok, mx, den, BLOCK_N, HAS_BIAS, SOFTMAX)
    broken, larger, _ = _plain_top_k_broken(key, pkey, ok, valid, K)
    fallback = tl.max(broken.to(tl.int32), axis=0)
    w_offs = tl.arange(0, WORDS)
    if fallback > 0:
        words = _full_top_k0_words(key, valid, nmask, K0, WORDS)
    else:
        chosen = ok & valid[:, None] & (larger < K0)
        hit = chosen[:, :, None] & ((ids >> 5)[:, :, None] == w_offs[None, None, :])  # [BM, BK, WORDS]
        bits = tl.where(hit, 1 << (ids & 31)[:, :, None], 0)
        words = tl.reduce(tl.reduce(bits, 0, _or), 0, _or)
    tl.store(part_ptr + pid * WORDS + w_offs, words)
    tl.store(part_ptr + tl.num_programs(0) * WORDS + pid, fallback)


@triton.jit
def _split_select_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, ntnp_ptr, part_ptr, M, N, P, scale, skip_at,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WORDS: tl.constexpr,
    BLOCK_P: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
    RENORMALIZE: tl.constexpr, USE_PDL: tl.constexpr, K0: tl.constexpr = 1, CHECK_ROWS: tl.constexpr = False,
    BLOCK_R: tl.constexpr = 1024, BLOCK_U: tl.constexpr = 1, ONE_PASS: tl.constexpr = False,
    ATOMIC: tl.constexpr = False, union_ptr=None, TOPK: tl.constexpr = False,
):  # fmt: skip
    """Split path, kernel B: the union (OR of kernel A's P bit sets), its size, then, unless the union has
    >= skip_at experts (then plain routing is left as it is), this program's rows' selection. ``CHECK_ROWS``
    (kernel A was prelaunched and counted every row below num_token_non_padded): where some such row's
    first routed id is -1 (it may be a row the reference leaves out), the union is rebuilt here from every
    row, the ids' masking included (``_union_words``), so the result is the reference's for any ids.
    ``ATOMIC``: kernel A (prelaunched) left the union as one set at ``union_ptr``: read as it stands."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    w_offs = tl.arange(0, WORDS)
    if ONE_PASS:
        # Prelaunched, one block of bit sets and one of ids: kernel A is done and the ids are written, so the
        # bit sets, the rows' first ids and the logits are all requested before any of them is used. With PDL
        # (``KIT_OEA_B_PDL``: launched while the router's last kernel may still run) the logits first, ranked,
        # and kernel A's union and the routed ids only after the wait (which also covers A where the capture
        # made its edge programmatic).
        if USE_PDL:
            key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS,
                                     SOFTMAX)  # fmt: skip
            gdc_wait()
        if ATOMIC:
            acc = tl.load(union_ptr + w_offs)
        else:
            p = tl.arange(0, BLOCK_P)
            part = tl.load(part_ptr + p[:, None] * WORDS + w_offs[None, :], mask=(p < P)[:, None], other=0)
            acc = tl.reduce(part, 0, _or)
        r = tl.arange(0, BLOCK_R)
        first = tl.load(ids_ptr + r * stride_i, mask=r < M, other=0)
        counted = r < M  # the rows kernel A counted: below M and num_token_non_padded (in its own dtype, as A)
        if HAS_NTNP:
            counted = counted & (r < tl.load(ntnp_ptr))
        if not USE_PDL:
            key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS,
                                     SOFTMAX)  # fmt: skip
        doubt = tl.max(((first < 0) & counted).to(tl.int32), axis=0)
    else:
        # The router logits predate kernel A: read and ranked while kernel A still runs (PDL).
        key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
        if USE_PDL:
            gdc_wait()
        if ATOMIC:
            acc = tl.load(union_ptr + w_offs)
        else:
            acc = tl.zeros([WORDS], dtype=tl.int32)
            for start in range(0, P, BLOCK_P):
                p = start + tl.arange(0, BLOCK_P)
                part = tl.load(part_ptr + p[:, None] * WORDS + w_offs[None, :], mask=(p < P)[:, None], other=0)
                acc = acc | tl.reduce(part, 0, _or)
        doubt = tl.zeros([], dtype=tl.int32)
        if CHECK_ROWS:
            for start in range(0, M, BLOCK_R):
                r = start + tl.arange(0, BLOCK_R)
                counted = r < M
                if HAS_NTNP:
                    counted = counted & (r < tl.load(ntnp_ptr))
                first = tl.load(ids_ptr + r * stride_i, mask=counted, other=0)
                doubt = tl.maximum(doubt, tl.max((first < 0).to(tl.int32), axis=0))
    if CHECK_ROWS:
        # Programs rewrite their rows while others read first ids: a partly masked row's -1 may be gone when a
        # later program looks, so programs may disagree on rebuilding, never on the union (such a row is valid,
        # so A counted it rightly; a row the reference leaves out stays all -1, seen by every program).
        # 1: rebuilt below (read by tests); after A's P sets and a word per program of this grid (_split_scratch)
        tl.store(part_ptr + P * WORDS + tl.num_programs(0) + tl.program_id(0), doubt)
        if doubt > 0:  # a row below num_token_non_padded may be masked: the union from every row, as the reference
            acc = _union_words(logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, ntnp_ptr, M, N, K, K0, BLOCK_U,
                               BLOCK_N, BLOCK_K, WORDS, HAS_BIAS, HAS_NTNP, SOFTMAX)  # fmt: skip
    bits = (acc[:, None] >> tl.arange(0, 32)[None, :]) & 1  # [WORDS, 32]
    if tl.sum(tl.sum(bits, axis=1), axis=0) < skip_at:
        active = tl.reshape(bits, [BLOCK_N]) > 0
        valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
        _select_store(key, mx, den, active, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i,
                      w_ptr, stride_w, scale, K, BLOCK_N, BLOCK_K, SOFTMAX, RENORMALIZE, TOPK)  # fmt: skip


@triton.jit
def _gathered_keys(logits_ptr, stride_l, bias_ptr, rows, ids, ok, mx, den,
                   BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, SOFTMAX: tl.constexpr):  # fmt: skip
    """``_row_keys``'s packed keys of the ``[BM, BK]`` experts ``ids`` alone (-(2**63 - 1) where not ``ok``),
    the same operations on the same values, so the same bits."""
    safe = tl.where(ok, ids, 0)
    x = tl.load(logits_ptr + rows[:, None] * stride_l + safe, mask=ok, other=float("-inf")).to(tl.float32)
    if SOFTMAX:  # noqa: SIM108 (a constexpr branch, not a value choice)
        s = tl.exp(x - mx[:, None]) / den[:, None]
    else:
        s = 1.0 / (1.0 + tl.exp(-x))
    r = tl.where(ok, s, 0.0)
    if HAS_BIAS:
        r = r + tl.load(bias_ptr + safe, mask=ok, other=0.0).to(tl.float32)
    rbits = r.to(tl.int32, bitcast=True)
    ordered = rbits ^ ((rbits >> 31) & 0x7FFFFFFF)
    key = (ordered.to(tl.int64) << 32) | (BLOCK_N - 1 - safe).to(tl.int64)
    return tl.where(ok, key, -9223372036854775807)


@triton.jit
def _repair_select_kernel(
    logits_ptr, stride_l, bias_ptr, ids_ptr, stride_i, w_ptr, stride_w, ntnp_ptr, part_ptr, M, N, P, scale, skip_at,
    K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, WORDS: tl.constexpr,
    BLOCK_P: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_NTNP: tl.constexpr, SOFTMAX: tl.constexpr,
    RENORMALIZE: tl.constexpr, USE_PDL: tl.constexpr,
):  # fmt: skip
    """Split path, repair kernel B: ``_split_select_kernel``'s result, found from the incoming plain top-k.
    Every plain id in the union S stays (ranked pairwise among them: c of them, slots 0..c-1); the other
    k - c slots take S's best experts below the row's plain k-th key (every expert outside the plain top-k
    ranks below all of it), in key order: a loop of max over the program's valid rows of k - c rounds,
    a bound read on the device (no round at all where S holds every row's plain top-k). A program with a
    valid row whose incoming ids are not its plain top-k (``_plain_top_k_broken``, its own check: it does
    not trust kernel A's) takes ``_select_store``'s full selection. Writes ``part[P * (WORDS + 1) +
    program]`` = 1 where it did, else 0, unless the batch is skipped (read by tests)."""
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    offs = tl.arange(0, BLOCK_N)
    nmask = offs < N
    key, mx, den = _row_keys(logits_ptr, stride_l, bias_ptr, rows, rmask, offs, nmask, BLOCK_N, HAS_BIAS, SOFTMAX)
    if USE_PDL:
        gdc_wait()
    acc = tl.zeros([WORDS], dtype=tl.int32)
    w_offs = tl.arange(0, WORDS)
    for start in range(0, P, BLOCK_P):
        p = start + tl.arange(0, BLOCK_P)
        part = tl.load(part_ptr + p[:, None] * WORDS + w_offs[None, :], mask=(p < P)[:, None], other=0)
        acc = acc | tl.reduce(part, 0, _or)
    bits = (acc[:, None] >> tl.arange(0, 32)[None, :]) & 1  # [WORDS, 32]
    if tl.sum(tl.sum(bits, axis=1), axis=0) < skip_at:
        active = tl.reshape(bits, [BLOCK_N]) > 0
        valid = _rows_valid(ids_ptr, stride_i, ntnp_ptr, rows, rmask, K, BLOCK_K, HAS_NTNP)
        koffs = tl.arange(0, BLOCK_K)
        ids, ok = _incoming(ids_ptr, stride_i, rows, rmask, N, K, BLOCK_K)
        pkey = _gathered_keys(logits_ptr, stride_l, bias_ptr, rows, ids, ok, mx, den, BLOCK_N, HAS_BIAS, SOFTMAX)
        # The hint, checked per row: K distinct ids, exactly the row's K best keys. A row whose router broke
        # a k-th-place tie otherwise, repeated an id, or handed over anything else sends this program to the
        # full selection, so the result is the reference's either way.
        broken, _, prev = _plain_top_k_broken(key, pkey, ok, valid, K)  # prev: the row's plain k-th key
        fallback = tl.max(broken.to(tl.int32), axis=0)
        tl.store(part_ptr + P * (WORDS + 1) + pid, fallback)
        if fallback > 0:
            _select_store(key, mx, den, active, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i,
                          w_ptr, stride_w, scale, K, BLOCK_N, BLOCK_K, SOFTMAX, RENORMALIZE)  # fmt: skip
        else:
            word = tl.sum(tl.where((ids >> 5)[:, :, None] == w_offs[None, None, :], acc[None, None, :], 0), axis=2)
            ins = ok & (((word >> (ids & 31)) & 1) > 0)  # [BM, BK]: plain id in S
            c = tl.sum(ins.to(tl.int32), axis=1)
            skey = tl.where(ins, pkey, -9223372036854775807)
            slot = tl.sum((skey[:, None, :] > skey[:, :, None]).to(tl.int32), axis=2)  # rank among the kept
            place = ins[:, None, :] & (slot[:, None, :] == koffs[None, :, None])  # [BM, slot, j]
            top1 = _key_index(tl.max(key, axis=1), BLOCK_N)
            kept = tl.sum(tl.where(place, ids[:, None, :], 0), axis=2)
            take = tl.max(place.to(tl.int32), axis=2) > 0
            out_ids = tl.where(take, kept, top1[:, None])
            akey = tl.where(active[None, :], key, -9223372036854775807)
            need = tl.max(tl.where(valid, K - c, 0), axis=0)
            for j in range(0, need):
                best = _next_key(akey, prev)
                found = (best > -9223372036854775807)[:, None]
                here = (koffs[None, :] == (c + j)[:, None]) & (koffs[None, :] < K) & found
                out_ids = tl.where(here, _key_index(best, BLOCK_N)[:, None], out_ids)
                take = take | here
                prev = best
            _store_routed(out_ids, take, mx, den, rows, rmask, valid, logits_ptr, stride_l, ids_ptr, stride_i,
                          w_ptr, stride_w, scale, K, BLOCK_K, SOFTMAX, RENORMALIZE)  # fmt: skip


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


def choose_path(m: int, block_n: int = 128) -> str:
    """``single``, ``repl`` or ``split`` (or a forced ``split-hint`` / ``split-light``) for a batch of ``m`` rows
    (``KIT_OEA_PATH``, ``KIT_OEA_SINGLE_MAX``, ``KIT_OEA_REPL_MAX``)."""
    path = os.environ.get(PATH_KNOB, "auto").strip().lower() or "auto"
    if path not in ("auto", *PATHS):
        raise ValueError(f"{PATH_KNOB}={path!r}: expected auto, single, repl, split, split-hint or split-light")
    if path != "auto":
        return path
    if m <= _int_knob(SINGLE_MAX_KNOB, DEFAULT_SINGLE_ELEMENTS // block_n):
        return "single"
    return "repl" if m <= _int_knob(REPL_MAX_KNOB, DEFAULT_REPL_MAX) else "split"


def _rows_knob(name: str, default: int, block_n: int) -> int:
    """A split kernel's rows per program: the knob (a power of 2) or ``default``, at most one tile
    (``_SPLIT_TILE`` logits) of ``block_n`` experts."""
    rows = _int_knob(name, default)
    if rows < 1 or rows & (rows - 1):
        raise ValueError(f"{name}={rows}: expected a power of 2")
    return min(rows, max(1, _SPLIT_TILE // block_n))


def _warps_knob(name: str, default: int) -> int:
    """A warps-per-program knob: 1, 2, 4, 8, 16 or 32 (refused before any launch, so before a side stream forks)."""
    warps = _int_knob(name, default)
    if warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"{name}={warps}: expected 1, 2, 4, 8, 16 or 32")
    return warps


def _flag_knob(name: str) -> bool:
    """An on/off knob: ``1`` (the default, also when empty) or ``0``; anything else is named."""
    raw = os.environ.get(name, "1").strip() or "1"
    if raw not in ("0", "1"):
        raise ValueError(f"{name}={raw!r}: expected 1 or 0")
    return raw == "1"


SELECT_TOPK_LOGITS = 512  # auto: tl.topk where a selecting program holds at most this many logits (_select_topk)


def _select_mode() -> str:
    """``KIT_OEA_SELECT``: ``auto`` (default, also when empty), ``rounds`` or ``topk``, in any case; anything else is
    refused. Read before any launch: by ``prelaunch_union`` before it forks (kernel B's choice then rides on the
    handle, as its warps do), by ``oea_reroute_triton_`` on every path without a prelaunch."""
    raw = os.environ.get(SELECT_KNOB, "auto").strip().lower() or "auto"
    if raw not in ("auto", "rounds", "topk"):
        raise ValueError(f"{SELECT_KNOB}={raw!r}: expected auto, rounds or topk")
    return raw


def _select_topk(mode: str, block_m: int, block_n: int, block_k: int) -> bool:
    """Whether a program that selects for ``block_m`` rows of ``block_n`` (padded) experts, ``block_k`` slots,
    finds each row's top-k with ``tl.topk`` (``_select_store``'s ``TOPK``), for kernel B and single / repl (the
    split-hint kernels keep their rounds). ``mode`` (``_select_mode``) ``auto``: where the program holds at most
    ``SELECT_TOPK_LOGITS`` logits, the K max rounds above. Top-1 routing (``block_k`` 1: one round, and
    ``tl.topk`` takes no k of 1) keeps the rounds whatever the knob says.

    Measured on one H100 (benchmarks/results/h100-hooktopk-2026-12-06/, c1-c4: four runs of each forced way, us
    over plain routing): topk 0.7 to 1.1 us less at 1-32 rows of either shape (one row a program), 0.5 to 1.0 at
    GLM-5's 128 rows (over torch ops +4.13 to +4.64 against +5.10 to +5.56), 0.2 to 0.5 at Qwen3's 128 and 0.4 to
    0.6 at its 64 (four rows of 128 a program; rerouted at 512 rows +4.52 against +4.89); 0.2 to 0.5 more at
    GLM-5's 64 and 256 rows (four rows of 256), and rerouted at GLM-5's 512 / 1024 rows (+6.04 / +15.69 against
    +5.65 / +12.42) and Qwen3's 1024 (+5.40 against +5.22). The one measured cell the threshold misjudges: Qwen3
    at 256 rows (two rows of 128) forced to reroute, +4.89 against +4.69."""
    return block_k > 1 and (mode == "topk" or (mode == "auto" and block_m * block_n <= SELECT_TOPK_LOGITS))


def _int_knob(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def use_pdl(device: torch.device) -> bool:
    """Programmatic dependent launch: on CUDA GPUs of compute capability 9.0 and up (``KIT_OEA_PDL``: auto,
    1 or 0), never under Triton's interpreter (it cannot run the PTX instructions)."""
    raw = os.environ.get(PDL_KNOB, "auto").strip().lower() or "auto"
    if raw not in ("auto", "1", "0"):
        raise ValueError(f"{PDL_KNOB}={raw!r}: expected auto, 1 or 0")
    if raw == "0" or device.type != "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _capability:
        _capability[index] = torch.cuda.get_device_capability(index)[0]
    return _capability[index] >= 9


def _b_pdl(device: torch.device) -> bool:
    """Whether the prelaunched kernel B is launched with PDL (``KIT_OEA_B_PDL``: 1, the default, or 0; only
    where ``use_pdl``): it may then start while the kernel before it (the router's last) still runs, reading
    and ranking the logits, and waits (``griddepcontrol.wait``) before it reads kernel A's union or the ids.
    On one H100 (benchmarks/results/h100-hookbpdl-2026-12-06/, three runs in two calls, each setting against
    the other in the same run): over the fused router 0.02 to 0.47 us less in every cell from two rows, over
    torch.topk 0.01 to 0.59 less; over the torch-ops router mixed, more in 68 of 114 pairings (42 less) by up to 0.43 us
    (GLM-5 at 256 rows +0.12 to +0.22 in both calls: +4.92-5.00 against +4.73-4.80), and at GLM-5's 128 rows a
    per-graph artifact of about 0.35 us (the graphs captured first cost more, whichever setting they had).

    What it assumes of the kernel before it (B reads the logits before its wait): that it lets its dependents
    start only once the logits are complete. True of sglang 0.5.23's GLM-5 routers: FlashInfer's
    ``fused_topk_deepseek`` (NoAuxTc: launched with PDL, ``griddepcontrol.wait`` first, ``launch_dependents``
    after its stores) and sgl-kernel's ``moe_fused_gate`` and torch ops (launched without PDL: dependents
    start as its blocks exit). A router that released its dependents before its own wait would let B read
    logits the gate GEMM is still writing: ``KIT_OEA_B_PDL=0`` for such a router."""
    return _flag_knob(B_PDL_KNOB) and use_pdl(device)


def _sms(device: torch.device) -> int:
    if device.type != "cuda":
        return 132
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _sm_count:
        _sm_count[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_count[index]


def _split_warps(path: str, block_m: int, block_n: int, programs: int) -> int:
    """Warps per program of the split kernels (measured on H100s; the calls are named in docs/oea-hook.md).

    - ``split`` (kernel A after the router): one where a program holds one row of 256+ experts and ORs at most
      64 bit sets, its reductions within a warp (h100-hook-2026-12-05: GLM-5 at 2-64 rows +4.9 to +5.4 us
      against +5.1 to +6.3 with four; at 128 rows one warp cost +13.4 us); eight for a full tile, else four.
    - ``split-prelaunched`` (kernel A beside the router, kernel B alone on the critical path): one where a
      program holds at most two rows of at most 128 experts and there are 64+ programs (Qwen3 at 64-256 rows:
      0.5 to 1.0 us less than four, h100-hookb-2026-12-05 call 2, four timings); two for a full tile
      (``_SPLIT_TILE`` logits, GLM-5 at 1024 rows: 0.3 to 0.5 us less than eight's lower timing, in three
      calls); else four (one warp cost 0.1 to 1.2 us more at GLM-5's 3-64 rows, and 3.0 to 3.4 us more at
      Qwen3's 1024 rows; two cost 0.9 to 1.5 us more at GLM-5's 256 rows)."""
    if path == "split-prelaunched":
        if block_n <= 128 and block_m <= 2 and programs >= 64:
            return 1
        return 2 if block_m * block_n >= _SPLIT_TILE else 4
    if path == "split" and block_m == 1 and block_n >= 256 and programs <= 64:
        return 1
    return 8 if block_m * block_n >= _SPLIT_TILE else 4


def _split_scratch(programs: int, words: int, device: torch.device, sets: int | None = None) -> torch.Tensor:
    """The split path's scratch, int32, uninitialised (each word is written before it is read): kernel A's
    bit sets (``sets * words``; ``sets``: kernel A's programs, None: ``programs``), then one word per program
    of kernel B from the light kernel A and one from the repair kernel B (or the prelaunched kernel B: 1 where
    it rebuilt the union), 1 where that program took the full-row computation because a row's incoming ids
    failed the plain-top-k check, else 0 (the old kernels leave them unwritten). ``programs``: kernel B's
    programs. Nothing on the hook's path reads those last words; tests replace this function to read them.
    With the atomic union kernel A writes none of it (``sets`` = 0)."""
    sets = programs if sets is None else sets
    return torch.empty(sets * words + 2 * programs, dtype=torch.int32, device=device)


class Prelaunched(NamedTuple):
    """The split path's kernel A, launched by ``prelaunch_union`` before the router's top-k (on a side
    stream on CUDA), for ``oea_reroute_triton_(prelaunched=...)`` to join and finish with kernel B."""

    part: torch.Tensor
    block_m: int
    programs: int  # kernel B's
    warps: int  # kernel B's
    sets: int  # kernel A's bit sets (its programs; 0 with the atomic union)
    stream: Any  # the side stream (torch.cuda.Stream), None where kernel A ran in order (CPU: the interpreter)
    shape: tuple[object, ...]  # what it was launched for (``_launch_shape``): kernel B checks it
    union: torch.Tensor | None = None  # KIT_OEA_UNION=atomic: the one bit set kernel A's programs OR into
    topk: bool = False  # kernel B's selection by tl.topk (_select_topk), decided with its layout

    @property
    def m(self) -> int:
        """The batch's rows."""
        return int(self.shape[0][0])  # type: ignore[index]


def _split_layout(
    m: int, block_n: int, path: str, device: torch.device, min_rows: int = 1
) -> tuple[int, int, int, int]:
    """(rows per program, programs, bit-set words per program, warps) of the split kernels; ``min_rows``: at
    least that many rows per program (the atomic union's kernel B, ``_union_layout``), unless ``KIT_OEA_SPLIT_ROWS``."""
    per_program = max(triton.next_power_of_2(triton.cdiv(m, _sms(device))), min_rows)
    block_m = _rows_knob(ROWS_KNOB, per_program, block_n)
    programs = triton.cdiv(m, block_m)
    return block_m, programs, block_n // 32, _warps_knob(WARPS_KNOB, _split_warps(path, block_m, block_n, programs))


# auto takes the atomic union for rows of this many (power-of-two padded) experts where the batch's nearest power
# of two (log scale) is one of these (_union_layout): measured best over three routers (GLM-5's 256, Qwen3's 128)
ATOMIC_AT: dict[int, tuple[int, ...]] = {256: (64, 256), 128: (64,)}
ATOMIC_MIN_ROWS = 4  # kernel B's rows per program there
ATOMIC_A_ROWS, ATOMIC_A_WARPS = 1, 2  # kernel A's own layout with the atomic union (_a_layout)
SETS_A_LOGITS, SETS_A_WARPS = 512, 4  # with the bit sets: at most this many logits a program of A (_a_layout)


def _union_layout(m: int, block_n: int) -> tuple[bool, int]:
    """(atomic union, kernel B's rows per program at least) of a prelaunched batch of ``m`` rows of
    ``block_n`` (padded) experts: how its kernel A hands the union to kernel B (``KIT_OEA_UNION``): ``sets``
    (one bit set per program of A, which B ORs) or ``atomic`` (A's programs OR into one set, zeroed on the side
    stream first; B reads WORDS words). ``auto`` (default): the layout measured best, over all three routers of
    ``oea_hook_overhead.py``, at the power of two nearest ``m`` (log scale): the atomic union (B four rows a
    program, A ``_a_layout``) for 256 experts where that is 64 or 256 (46 to 90 and 182 to 362 rows),
    for 128 experts where it is 64 (Qwen3 at 64 rows +3.73-4.00 / +3.66-3.74 / +3.36-3.39 against the bit
    sets' +3.93-4.14 / +3.77-3.86 / +3.57; at 256 rows +6.1 over the fused router against their +2.4); the
    bit sets elsewhere and for other padded expert counts (not measured). Measured on one H100
    (docs/oea-hook.md, "Kernel A's union as one set"; benchmarks/results/h100-hook*-2026-12-06/), GLM-5, us
    over plain routing by router (torch ops / torch.topk / one fused kernel), atomic against bit sets:

    - 64 rows: +3.9-4.3 / +4.0-4.1 / +4.0 against +4.5-4.6 / +4.3-4.4 / +4.3; 256 rows: +4.1-4.9 / +4.4 /
      +4.6 against +5.0-5.6 / +5.4-5.5 / +5.0 (kernel B reading one set: 3.5 us against 4.4, torch.profiler).
    - 128 rows: +4.4-5.0 / +4.0-4.1 / **+7.8** against +5.1-5.2 / +4.5-4.7 / +4.4; 512 / 1024 rows: +2.3-2.9 /
      +2.0-2.5 / **+7.6** and +2.8-3.6 / +2.6-3.4 / **+8.6-8.7** against +4.5-4.9 / +3.1-3.5 / +4.3 and
      +4.0-5.3 / +4.4-5.2 / +6.2: there kernel A's branch (the zeroing, then A at one row a program: 6.3 us at
      128 rows, 10.5 at 1024, against the bit sets' 2.3 and 7.2) is longer than a fused router (2.9 to 5.3 us)
      and shows. (The bit sets' numbers here are with kernel A on B's layout; with ``_a_layout``'s, timed
      as one default, 512 / 1024 rows are +3.7 / +3.4-3.6 / +3.4-3.5 and +4.5-4.7 / +4.4 / +4.6-4.7:
      benchmarks/results/h100-hookrule2-2026-12-06/.)
    - Below 64 rows (timed over torch ops and torch.topk only) the atomic union cost 0.2 to 0.6 us more over
      torch.topk and -0.15 to +0.7 over torch ops.

    Why the atomic OR makes kernel A slow, and why so unevenly (one row a program, two warps: 2.3 / 6.3-6.4 /
    2.9-6.7 us at 64 / 128 / 256 rows; four rows a program 12.4 / 22.5 at 128 / 256), is not found: its PTX is
    the bit sets' but for the last 8 stores (one atomic per word and program; ptxas: 40 registers either way
    at four rows a program, 31 against 28 at two, no spills; benchmarks/results/h100-hookdiag-2026-12-06/
    ptx.txt). Between the measured sizes the rule is the nearest measurement, not a measurement."""
    raw = os.environ.get(UNION_KNOB, "auto").strip().lower() or "auto"
    if raw not in ("auto", "sets", "atomic"):
        raise ValueError(f"{UNION_KNOB}={raw!r}: expected auto, sets or atomic")
    if raw != "auto":
        return raw == "atomic", 1
    nearest = 1 << max(0, round(math.log2(m))) if m > 0 else 0
    atomic = nearest in ATOMIC_AT.get(block_n, ())
    return atomic, ATOMIC_MIN_ROWS if atomic else 1


def _a_layout(m: int, block_n: int, atomic: bool, b_rows: int) -> tuple[int, int, int]:
    """(rows per program, programs, warps) of the prelaunched kernel A, whose grid is its own (kernel B reads
    all of A's sets, or the one set, whatever its own grid), unless ``KIT_OEA_A_ROWS`` / ``KIT_OEA_A_WARPS``:

    - the atomic union: ``ATOMIC_A_ROWS`` / ``ATOMIC_A_WARPS`` (one row a program, two warps);
    - the bit sets: kernel B's rows per program (``b_rows``) but at most ``SETS_A_LOGITS`` (512) logits a
      program, four warps: two rows of GLM-5's 256 experts, four of Qwen3's 128. So kernel A takes more
      programs of fewer rows than B from 363 rows (GLM-5: B four rows a program) or 529 (Qwen3: B eight).
      Swept on one H100 (``--forced sweep-sets``, A at 1-8 rows x 1-4 warps, one round,
      benchmarks/results/h100-hooksets-2026-12-06/), us over plain routing, over torch ops / the fused router:
      GLM-5 at 1024 rows +5.01 / +4.75 against B's layout (eight rows, two warps) +5.25 / +5.90 (kernel A
      alone 4.0 against 7.2 us beside the 5.3 us router); at 512 rows +3.52 / +3.68 against +4.56 / +4.51;
      Qwen3 at 1024 rows (four rows) +3.81 / +3.65 against +4.82 / +3.68; at 128-512 rows (one to four rows,
      four warps against B's one or four) within 0.5 us of B's layout either way."""
    if atomic:
        rows, warps = ATOMIC_A_ROWS, ATOMIC_A_WARPS
    else:
        rows, warps = min(b_rows, max(1, SETS_A_LOGITS // block_n)), SETS_A_WARPS
    block_m = _rows_knob(A_ROWS_KNOB, rows, block_n)
    return block_m, triton.cdiv(m, block_m), _warps_knob(A_WARPS_KNOB, warps)


def prelaunch_enabled() -> bool:
    """``KIT_OEA_PRELAUNCH``: ``1`` (default) or ``0`` (kernel A after the router, as before; benchmarks)."""
    return _flag_knob(PRELAUNCH_KNOB)


def _prelaunch_path(m: int) -> str:
    """The path of a batch whose kernel A may be prelaunched: ``KIT_OEA_PATH`` when forced, else split from
    ``KIT_OEA_PRELAUNCH_MIN`` rows (default 2: prelaunched, the split path costs less than single from two
    rows; H100, 2026-12-05), single below."""
    path = os.environ.get(PATH_KNOB, "auto").strip().lower() or "auto"
    if path != "auto":
        return choose_path(m)
    return "split" if m >= _int_knob(PRELAUNCH_MIN_KNOB, DEFAULT_PRELAUNCH_MIN) else "single"


def prelaunch_union(
    router_logits: torch.Tensor,
    *,
    k0: int,
    k: int,
    softmax: bool,
    correction_bias: torch.Tensor | None,
    num_token_non_padded: torch.Tensor | None,
) -> Prelaunched | None:
    """Kernel A of the split path started before the router's own top-k, so that it runs beside it: on CUDA
    on a side stream forked from the current one (a parallel branch of a captured graph), which
    ``oea_reroute_triton_(prelaunched=...)`` joins before kernel B. It needs only the router logits (and the
    bias and num_token_non_padded): it counts every row below num_token_non_padded, and kernel B checks the
    routed ids before it trusts that (``CHECK_ROWS``). None where the batch takes another path (single: one
    launch already), where it is off (``KIT_OEA_PRELAUNCH=0``) or the tensors are unsupported; the caller
    then calls ``oea_reroute_triton_`` without it. Shapes and knobs only decide: CUDA-graph safe."""
    m, n = router_logits.shape
    block_n, block_k = max(triton.next_power_of_2(n), 32), triton.next_power_of_2(k)
    if (
        m == 0
        or n > MAX_EXPERTS
        or router_logits.stride(1) != 1
        or (correction_bias is not None and (correction_bias.dim() != 1 or not correction_bias.is_contiguous()))
        or not prelaunch_enabled()
        or _prelaunch_path(m) != "split"
    ):
        return None
    device = router_logits.device
    atomic, min_rows = _union_layout(m, block_n)
    block_m, programs, words, warps = _split_layout(m, block_n, "split-prelaunched", device, min_rows)
    topk = _select_topk(_select_mode(), block_m, block_n, block_k)  # refused before the fork, as the layout's knobs
    a_rows, a_programs, a_warps = _a_layout(m, block_n, atomic, block_m)
    sets = 0 if atomic else a_programs  # the bit sets kernel B ORs (none with the atomic union)
    dummy = router_logits
    stream = None
    if router_logits.is_cuda:
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in _side_streams:
            _side_streams[index] = torch.cuda.Stream(device=index)
        stream = _side_streams[index]
        stream.wait_stream(torch.cuda.current_stream(index))
    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
        # Allocated on the side stream: its memory goes back to that stream's pool, so nothing reuses it before
        # kernel A is done, even if the caller never reaches the hook (an error in the router); the next
        # reuse there is ordered after this layer's kernel B by the next fork (the side stream waits for the
        # current one first).
        part = _split_scratch(programs, words, device, sets=sets)
        # atomic: the one set, zeroed on this stream before kernel A ORs into it
        union = torch.zeros(words, dtype=torch.int32, device=device) if atomic else None
        _part_kernel[(a_programs,)](
            router_logits, router_logits.stride(0), correction_bias if correction_bias is not None else dummy,
            dummy, 0, num_token_non_padded if num_token_non_padded is not None else dummy, part, m, n,
            K=k, K0=k0, BLOCK_M=a_rows, BLOCK_N=block_n, BLOCK_K=block_k, WORDS=words, num_warps=a_warps,
            HAS_BIAS=correction_bias is not None, HAS_NTNP=num_token_non_padded is not None, SOFTMAX=softmax,
            USE_PDL=False, USE_IDS=False, ATOMIC=union is not None, union_ptr=union,
        )  # fmt: skip
    shape = _launch_shape(router_logits, k0, k, softmax, correction_bias, num_token_non_padded)
    return Prelaunched(part, block_m, programs, warps, sets, stream, shape, union, topk)


def _launch_shape(
    logits: torch.Tensor, k0: int, k: int, softmax: bool, bias: torch.Tensor | None, ntnp: torch.Tensor | None
) -> tuple[object, ...]:
    """What a prelaunched kernel A was launched for, which kernel B must be launched for as well."""
    return (tuple(logits.shape), logits.data_ptr(), k0, k, softmax,
            None if bias is None else bias.data_ptr(), None if ntnp is None else ntnp.data_ptr())  # fmt: skip


def join(prelaunched: Prelaunched) -> None:
    """Make the current stream wait for a prelaunched kernel A (its side stream): ``oea_reroute_triton_``
    does this itself; a caller that takes another path after ``prelaunch_union`` must call it."""
    if prelaunched.stream is not None:
        torch.cuda.current_stream(prelaunched.part.device).wait_stream(prelaunched.stream)


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
    skip_at: int | None = None,
    prelaunched: Prelaunched | None = None,
) -> None:
    """The fused OEA step; arguments already checked by ``kit_oea.oea.oea_reroute_``. When the union of the
    valid rows' top-k0 has ``skip_at`` experts or more (None: never), the kernels leave the routing as they
    found it: a decision made on the device, from the data, with launches and grids fixed by the shapes.
    ``prelaunched``: kernel A as ``prelaunch_union`` started it for these logits; only kernel B runs here."""
    m, n = router_logits.shape
    if prelaunched is not None:
        here = _launch_shape(router_logits, k0, k, softmax, correction_bias, num_token_non_padded)
        if prelaunched.shape != here:
            join(prelaunched)
            raise ValueError(f"prelaunched for (logits shape, logits, k0, k, softmax, bias, num_token_non_padded) = "
                             f"{prelaunched.shape}, called with {here}")  # fmt: skip
    if m == 0:
        return
    block_n, block_k = max(triton.next_power_of_2(n), 32), triton.next_power_of_2(k)
    dummy = router_logits  # never read when the matching HAS_* flag is off
    bias = correction_bias if correction_bias is not None else dummy
    ntnp = num_token_non_padded if num_token_non_padded is not None else dummy
    pdl = use_pdl(router_logits.device)
    flags = {"HAS_BIAS": correction_bias is not None, "HAS_NTNP": num_token_non_padded is not None,
             "SOFTMAX": softmax, "USE_PDL": pdl}  # fmt: skip
    launch = {"launch_pdl": True} if pdl else {}
    scale = 1.0 if routed_scaling_factor is None else float(routed_scaling_factor)
    at = n + 1 if skip_at is None else int(skip_at)
    stride_l, stride_i, stride_w = router_logits.stride(0), topk_ids.stride(0), topk_weights.stride(0)
    if prelaunched is not None:
        b_pdl = _b_pdl(router_logits.device)
        join(prelaunched)
        _split_select_kernel[(prelaunched.programs,)](
            router_logits, stride_l, bias, topk_ids, stride_i, topk_weights, stride_w, ntnp, prelaunched.part, m, n,
            prelaunched.sets, scale, at, K=k, BLOCK_M=prelaunched.block_m, BLOCK_N=block_n, BLOCK_K=block_k,
            WORDS=block_n // 32, BLOCK_P=min(triton.next_power_of_2(max(prelaunched.sets, 1)), _ONE_PASS_SETS),
            RENORMALIZE=renormalize, num_warps=prelaunched.warps, K0=k0, CHECK_ROWS=True,
            BLOCK_R=min(triton.next_power_of_2(m), _ONE_PASS_ROWS),
            # the fallback's rows per step: eight logits a thread on a GPU (more spilled registers and slowed
            # even the fast path: H100, call 1), one block under the interpreter (CPU tensors; tests)
            BLOCK_U=min(triton.next_power_of_2(m),
                        max(1, (256 * prelaunched.warps if router_logits.is_cuda else 8192) // block_n)),
            ONE_PASS=prelaunched.sets <= _ONE_PASS_SETS and m <= _ONE_PASS_ROWS, **{**flags, "USE_PDL": b_pdl},
            ATOMIC=prelaunched.union is not None, union_ptr=prelaunched.union, TOPK=prelaunched.topk,
            **({"launch_pdl": True} if b_pdl else {}),
        )  # fmt: skip
        return
    path, mode = choose_path(m, block_n), _select_mode()  # both before any launch, whatever the path
    if not path.startswith("split"):
        block_m = min(triton.next_power_of_2(m), max(1, _SINGLE_TILE // block_n))
        block_m2 = block_m if path == "single" else _REPL_ROWS
        rows = m if path == "single" else block_m2
        _union_kernel[(triton.cdiv(m, rows),)](
            router_logits, stride_l, bias, topk_ids, stride_i, topk_weights, stride_w, ntnp, m, n, scale, at, rows,
            K=k, K0=k0, BLOCK_M=block_m, BLOCK_M2=block_m2, BLOCK_N=block_n, BLOCK_K=block_k,
            RENORMALIZE=renormalize, num_warps=_warps_knob(SINGLE_WARPS_KNOB, 8 if block_m * block_n >= 4096 else 4),
            TOPK=_select_topk(mode, block_m2, block_n, block_k), **flags, **launch,
        )  # fmt: skip
        return
    block_m, programs, words, warps = _split_layout(m, block_n, path, router_logits.device)
    part = _split_scratch(programs, words, router_logits.device)
    part_kernel = _part_kernel if path == "split" else _light_part_kernel
    part_kernel[(programs,)](
        router_logits, stride_l, bias, topk_ids, stride_i, ntnp, part, m, n,
        K=k, K0=k0, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, WORDS=words, num_warps=warps, **flags,
        **launch,
    )  # fmt: skip
    select_kernel = _repair_select_kernel if path == "split-hint" else _split_select_kernel
    select_kernel[(programs,)](
        router_logits, stride_l, bias, topk_ids, stride_i, topk_weights, stride_w, ntnp, part, m, n, programs, scale,
        at, K=k, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, WORDS=words,
        BLOCK_P=min(triton.next_power_of_2(programs), _ONE_PASS_SETS), RENORMALIZE=renormalize, num_warps=warps,
        **flags, **launch, **({} if path == "split-hint" else {"TOPK": _select_topk(mode, block_m, block_n, block_k)}),
    )  # fmt: skip
