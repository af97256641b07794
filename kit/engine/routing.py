"""Expert routing for the embedded MoE engine: plain top-k and OEA.

Both functions are pure and work on a whole batch of router scores at once.

``scores`` are router *probabilities* (softmax of the router logits), shape ``[B, E]``. The returned
``ids`` have shape ``[B, k]`` (int64, best expert first) and ``weights`` shape ``[B, k]`` (float32):
each token's scores renormalised over the experts it finally uses.

OEA (Opportunistic Expert Activation, arXiv 2511.02237), simplified as in the paper's two phases:

1. every valid token keeps its top-``k0`` experts; the union of those sets over the valid tokens of the
   batch is the active set ``S`` (the experts that must be loaded anyway);
2. every valid token then uses its top-``k`` experts *among* ``S`` (equivalently, it piggybacks its
   next-best experts that are already in ``S`` until it has ``k``).

The output keeps a fixed shape: when ``|S| < k`` (for instance at batch size 1) the missing slots hold
the token's top-1 expert id with weight 0. Padded rows (``valid=False``) get ids ``-1`` and weight 0 and
do not contribute to ``S``. Ties are broken by the lower expert index (stable sort). OEA only makes sense
for decode steps; the engine uses plain top-k for prefill.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _check(scores: npt.NDArray[np.floating], k: int) -> None:
    if scores.ndim != 2:
        raise ValueError(f"scores must be 2-D [B, E], got shape {scores.shape}")
    if not 1 <= k <= scores.shape[1]:
        raise ValueError(f"k must be in [1, E={scores.shape[1]}], got {k}")
    if not np.all(np.isfinite(scores)):
        raise ValueError("scores must be finite")


def top_n(scores: FloatArray, n: int) -> IntArray:
    """Per row the ids of the ``n`` highest scores, best first; ties go to the lower index first.

    Implemented as ``n`` rounds of ``argmax`` (which returns the first maximum), which is both cheaper
    than a full sort for small ``n`` and exactly the order a stable descending sort would give.
    Entries equal to ``-inf`` are treated as unavailable; callers guarantee at least ``n`` finite ones.
    """
    work = np.array(scores, dtype=np.float32, copy=True)
    rows = np.arange(work.shape[0])
    ids = np.empty((work.shape[0], n), dtype=np.int64)
    for j in range(n):
        best = np.argmax(work, axis=1)
        ids[:, j] = best
        work[rows, best] = -np.inf
    return ids


def _renormalise(scores: FloatArray, ids: IntArray, keep: BoolArray) -> FloatArray:
    """``scores[row, ids]`` divided by their sum over the kept slots; dropped slots get weight 0.

    The sum and the division are done in float64 (the sum of a few float32 values is then exact, so the
    result does not depend on the summation order) and rounded once to float32.
    """
    picked = np.take_along_axis(scores, np.maximum(ids, 0), axis=1).astype(np.float64)
    picked[~keep] = 0.0
    total = picked.sum(axis=1, keepdims=True)
    total[total == 0] = 1.0
    out: FloatArray = (picked / total).astype(np.float32)
    return out


def topk_route(scores: npt.NDArray[np.floating], k: int) -> tuple[IntArray, FloatArray]:
    """Per row the ``k`` highest-scoring experts, weights renormalised over the chosen set."""
    _check(scores, k)
    s32 = np.asarray(scores, dtype=np.float32)
    ids = top_n(s32, k)
    weights = _renormalise(s32, ids, np.ones(ids.shape, dtype=bool))
    return ids, weights


def oea_route(
    scores: npt.NDArray[np.floating], k: int, k0: int, valid: npt.NDArray[np.bool_] | None = None
) -> tuple[IntArray, FloatArray]:
    """Opportunistic Expert Activation: top-``k0`` per token, then piggyback on the batch's active set.

    See the module docstring for the exact rule. At batch size 1 this equals plain top-``k0`` routing
    (followed by ``k - k0`` weight-0 filler slots).
    """
    _check(scores, k)
    if not 1 <= k0 <= k:
        raise ValueError(f"k0 must be in [1, k={k}], got {k0}")
    s32 = np.asarray(scores, dtype=np.float32)
    batch, _ = s32.shape
    valid_rows = np.ones(batch, dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    if valid_rows.shape != (batch,):
        raise ValueError(f"valid must have shape ({batch},), got {valid_rows.shape}")

    ids = np.full((batch, k), -1, dtype=np.int64)
    weights = np.zeros((batch, k), dtype=np.float32)
    if not valid_rows.any():
        return ids, weights

    sv = s32[valid_rows]
    first = top_n(sv, k0)  # phase 1: every valid token's own top-k0
    active = np.zeros(s32.shape[1], dtype=bool)
    active[first.ravel()] = True
    n_chosen = min(k, int(active.sum()))  # the same for every valid row: S is shared

    # phase 2: the top-k among the active set S (a token's own top-k0 are in S and come first)
    row_ids = np.empty((sv.shape[0], k), dtype=np.int64)
    row_ids[:, :n_chosen] = top_n(np.where(active, sv, np.float32(-np.inf)), n_chosen)
    row_ids[:, n_chosen:] = first[:, :1]  # fillers: the token's top-1 expert, weight 0
    keep = np.zeros((sv.shape[0], k), dtype=bool)
    keep[:, :n_chosen] = True

    ids[valid_rows] = row_ids
    weights[valid_rows] = _renormalise(sv, row_ids, keep)
    return ids, weights


def unique_experts(ids: npt.NDArray[np.integer], weights: npt.NDArray[np.floating]) -> int:
    """Number of distinct experts that carry a nonzero weight (the experts a step must load)."""
    used = np.asarray(ids)[(np.asarray(weights) != 0) & (np.asarray(ids) >= 0)]
    return int(np.unique(used).size)
