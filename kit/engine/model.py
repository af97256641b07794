"""A tiny random Mixture-of-Experts decoder in numpy.

The first layer's input is ``h = embedding[t] @ W_in`` (a fixed random projection, so the tied output
head does not simply favour the current token). Every layer is::

    u   = rmsnorm(h)
    c_t = decay * c_{t-1} + gain * (u_t @ M)       # causal context mixer (cheap stand-in for attention)
    x   = h + c
    p   = softmax(rmsnorm(x) @ router + router_bias)
    h   = x + sum_j w_j * expert_j(rmsnorm(x))    # expert_j(z) = relu(z @ W1_j) @ W2_j

and the next token is ``argmax(rmsnorm(h) @ embedding.T)`` (greedy, deterministic). The only per-sequence
state (the "KV cache") is one context vector per layer, shape ``[layers, hidden]``.

The MoE block computes every touched expert exactly once for all the tokens routed to it (gather the
rows, ``x @ W1``, relu, ``@ W2``, scatter-add the weighted rows), so a step reads each touched expert's
weights once and its time grows with the number of distinct experts in the step, like a memory-bound
decode step of a real MoE. Weight-0 slots (OEA fillers) are skipped.

Prefill uses plain top-k routing; decode steps use OEA when ``oea_k0 > 0``.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kit.engine.config import ModelConfig
from kit.engine.routing import oea_route, topk_route
from kit.engine.weights import Draw, load_or_draw

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]

_EPS = np.float32(1e-6)
#: Scale of the projected token embedding fed into the first layer.
INPUT_SCALE = np.float32(1.0)
#: RMS of one expert's output for a unit-RMS input. Large enough that the random decoder is chaotic:
#: sequences with slightly different prompts diverge and rarely repeat a token, like real text, instead
#: of collapsing onto a few shared trajectories (which would make routing unrealistically uniform).
EXPERT_GAIN = 16.0
#: Standard deviation of the router logits for a unit-RMS input (before the bias).
ROUTER_GAIN = 1.0
#: Rows of an expert's matmul are padded to a multiple of this (OpenBLAS is much slower for odd row counts).
ROW_ALIGN = 4


@dataclass
class StepResult:
    """Output of a prefill or decode step."""

    next_tokens: IntArray  # [n]
    state: FloatArray  # [n, layers, hidden]
    unique_experts: list[int]  # per layer: distinct experts with nonzero weight in this step
    tokens: int  # rows pushed through the layers
    expert_counts: IntArray  # [layers, experts]: routed slots per expert (fillers too), as sglang's recorder counts


def rmsnorm(x: FloatArray) -> FloatArray:
    """Row-wise RMS normalisation without a learned scale."""
    ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=np.float32)
    out: FloatArray = (x / np.sqrt(ms + _EPS)).astype(np.float32, copy=False)
    return out


def softmax(logits: FloatArray) -> FloatArray:
    """Row-wise softmax in float32."""
    z = logits - logits.max(axis=-1, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=-1, keepdims=True)
    out: FloatArray = z.astype(np.float32, copy=False)
    return out


def draws(cfg: ModelConfig) -> list[Draw]:
    """The weights in the order they are drawn from ``default_rng(cfg.seed)``, each with its scale."""
    n_l, n_e, n_h, n_f = cfg.layers, cfg.experts, cfg.hidden, cfg.expert_ffn
    return [Draw("embedding", (cfg.vocab, n_h), 1.0),
            Draw("mixer", (n_l, n_h, n_h), 1.0 / np.sqrt(n_h)),
            Draw("w_in", (n_h, n_h), 1.0 / np.sqrt(n_h)),
            Draw("router", (n_l, n_h, n_e), ROUTER_GAIN / np.sqrt(n_h)),
            Draw("router_bias", (n_l, n_e), cfg.router_skew),
            Draw("w1", (n_l, n_e, n_h, n_f), 1.0 / np.sqrt(n_h)),
            Draw("w2", (n_l, n_e, n_f, n_h), EXPERT_GAIN / np.sqrt(n_f / 2.0))]


class MoEModel:
    """Random-weight MoE decoder; all weights come from ``numpy.random.default_rng(cfg.seed)``."""

    def __init__(self, cfg: ModelConfig, weights_cache: Path | None = None) -> None:
        """``weights_cache``: a directory to read the draw from, or keep it in (kit.engine.weights); None: draw."""
        cfg.validate()
        self.cfg = cfg
        t0 = time.perf_counter()
        w, how = load_or_draw(cfg.seed, draws(cfg), weights_cache)
        self.weights_source = f"{how} in {time.perf_counter() - t0:.1f}s"
        self.embedding, self.mixer, w_in = w["embedding"], w["mixer"], w["w_in"]
        self.router, self.router_bias, self.w1, self.w2 = w["router"], w["router_bias"], w["w1"], w["w2"]
        self.input_embedding: FloatArray = (self.embedding @ w_in) * INPUT_SCALE
        # Per-channel decay of the context mixer: time constants from 2 to ``context_memory`` tokens, with
        # variance-preserving input gains, so both recent and distant tokens shape the context.
        tau = np.geomspace(2.0, float(cfg.context_memory), cfg.hidden)
        self._decay = (1.0 - 1.0 / tau).astype(np.float32)
        self._gain = np.sqrt(1.0 - self._decay.astype(np.float64) ** 2).astype(np.float32)

    # ----------------------------------------------------------------------------------------- steps

    def new_state(self, n: int) -> FloatArray:
        """An empty per-sequence state for ``n`` sequences."""
        return np.zeros((n, self.cfg.layers, self.cfg.hidden), dtype=np.float32)

    def prefill(self, prompts: list[list[int]]) -> StepResult:
        """Run whole prompts through the layers (plain top-k routing); return each one's first token."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise ValueError("prefill needs at least one non-empty prompt")
        lengths = np.array([len(p) for p in prompts], dtype=np.int64)
        tokens = np.concatenate([np.asarray(p, dtype=np.int64) for p in prompts])
        seq = np.repeat(np.arange(len(prompts)), lengths)
        pos = np.arange(tokens.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        last = np.cumsum(lengths) - 1

        h = self.input_embedding[tokens]
        state = self.new_state(len(prompts))
        uniq: list[int] = []
        counts: list[IntArray] = []
        for layer in range(self.cfg.layers):
            c = self._causal_ema(rmsnorm(h) @ self.mixer[layer], seq, pos, len(prompts))
            state[:, layer] = c[last]
            x = h + c
            xin = rmsnorm(x)
            ids, weights = topk_route(self._router_probs(layer, xin), self.cfg.top_k)
            moe, n_unique = self._moe(layer, xin, ids, weights)
            uniq.append(n_unique)
            counts.append(np.bincount(ids[ids >= 0], minlength=self.cfg.experts))
            h = x + moe
        return StepResult(self._greedy(h[last]), state, uniq, int(tokens.size), np.stack(counts))

    def decode(self, tokens: npt.NDArray[np.integer], state: FloatArray) -> StepResult:
        """One decode step for a batch: ``tokens[i]`` is sequence i's newest token, ``state[i]`` its state.

        Returns the next tokens and the updated state (a new array). Uses OEA when ``cfg.oea_k0 > 0``.
        """
        toks = np.asarray(tokens, dtype=np.int64)
        if toks.ndim != 1 or state.shape != (toks.size, self.cfg.layers, self.cfg.hidden):
            raise ValueError(f"bad decode shapes: tokens {toks.shape}, state {state.shape}")
        h = self.input_embedding[toks]
        new_state = np.empty_like(state)
        uniq: list[int] = []
        counts: list[IntArray] = []
        for layer in range(self.cfg.layers):
            mixed = rmsnorm(h) @ self.mixer[layer]
            c = self._decay * state[:, layer] + self._gain * mixed
            new_state[:, layer] = c
            x = h + c
            xin = rmsnorm(x)
            probs = self._router_probs(layer, xin)
            if self.cfg.oea_k0 > 0:
                ids, weights = oea_route(probs, self.cfg.top_k, self.cfg.oea_k0)
            else:
                ids, weights = topk_route(probs, self.cfg.top_k)
            moe, n_unique = self._moe(layer, xin, ids, weights)
            uniq.append(n_unique)
            counts.append(np.bincount(ids[ids >= 0], minlength=self.cfg.experts))
            h = x + moe
        return StepResult(self._greedy(h), new_state, uniq, int(toks.size), np.stack(counts))

    # ------------------------------------------------------------------------------------- internals

    def _router_probs(self, layer: int, xin: FloatArray) -> FloatArray:
        return softmax(xin @ self.router[layer] + self.router_bias[layer])

    def _causal_ema(self, u: FloatArray, seq: IntArray, pos: IntArray, n: int) -> FloatArray:
        """Per-sequence causal moving average of the rows of ``u`` (sequences packed one after another).

        Walks the positions in order; at position ``t`` it updates every sequence that is that long.
        """
        by_position = np.lexsort((seq, pos))
        counts = np.bincount(pos, minlength=int(pos.max()) + 1)
        bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
        acc = np.zeros((n, u.shape[1]), dtype=np.float32)
        out = np.empty_like(u)
        for start, stop in itertools.pairwise(bounds):
            rows = by_position[start:stop]
            owners = seq[rows]
            acc[owners] = self._decay * acc[owners] + self._gain * u[rows]
            out[rows] = acc[owners]
        return out

    def _moe(self, layer: int, x: FloatArray, ids: IntArray, weights: FloatArray) -> tuple[FloatArray, int]:
        """Mixture of the routed experts; each touched expert runs once on all of its rows."""
        k = ids.shape[1]
        rows = np.repeat(np.arange(ids.shape[0]), k)
        flat_ids, flat_w = ids.ravel(), weights.ravel()
        keep = (flat_w != 0) & (flat_ids >= 0)
        rows, flat_ids, flat_w = rows[keep], flat_ids[keep], flat_w[keep]
        order = np.argsort(flat_ids, kind="stable")
        rows, flat_ids, flat_w = rows[order], flat_ids[order], flat_w[order]
        experts, starts = np.unique(flat_ids, return_index=True)
        ends = np.append(starts[1:], flat_ids.size)

        out = np.zeros_like(x)
        w1, w2 = self.w1[layer], self.w2[layer]
        for e, s, t in zip(experts.tolist(), starts.tolist(), ends.tolist(), strict=True):
            r = rows[s:t]  # distinct rows: a token uses an expert at most once
            xe = x[r]
            n = xe.shape[0]
            if n > 1 and n % ROW_ALIGN:
                xe = np.concatenate([xe, np.zeros((ROW_ALIGN - n % ROW_ALIGN, xe.shape[1]), np.float32)])
            a = xe @ w1[e]
            np.maximum(a, 0, out=a)
            y = (a @ w2[e])[:n]
            y *= flat_w[s:t, None]
            out[r] += y
        return out, int(experts.size)

    def _greedy(self, h: FloatArray) -> IntArray:
        logits = rmsnorm(h) @ self.embedding.T
        best: IntArray = np.argmax(logits, axis=-1).astype(np.int64)
        return best

