"""OEA in transformers' Qwen3-MoE router, on decode steps only, under continuous batching (transformers 5.24.0).

``install(k0)`` replaces three methods at class level (nothing is installed when the knob is unset: the
baseline runs transformers unchanged):

- ``ContinuousBatchingIOs.prepare_batch_tensors``: before the original runs, it classifies every request of
  the batch it is given (``decode_rows``): a row is a *decode* row when it feeds exactly one token and
  that token comes after the whole prompt (``query_length == 1`` and ``position_offset >= len(initial_tokens)``:
  the token the previous step generated). A prompt's last chunk of one token (chunked prefill) is not
  decode; after a soft reset (offloading) the re-prefill is not decode and the steps after it are.
- ``ModelRunner.compute_batch``: turns that classification into the batch's *mode* for the forward pass it
  runs (``batch_mode``) and clears it afterwards. Every batch, the loop prepares and then computes in the
  same thread, in that order (synchronous and asynchronous batching alike), so the pair always matches.
- ``Qwen3MoeTopKRouter.forward``: the original, then, by mode: ``off`` returns it unchanged; ``all``
  passes the whole output through ``kit_oea.hf.reroute_router_output`` (the shared hook); ``rows`` reroutes
  only the decode tokens of a mixed batch (prefill and decode rows together): their union is taken over
  the decode tokens alone, and the prefill tokens keep plain top-k.

CUDA graphs: a replayed graph runs none of this Python, so the mode must be a function of the graph's key.
On a graphed path, the decode fast path (block table; every row feeds one token) is ``all`` and the varlen
path is ``off`` (a varlen graph is shared by mixed and all-decode batches of one padded size). Padded rows
of a graphed decode batch join the union (``kit_oea.hf`` takes no non-padded count). Without graphs (the
default with SDPA/eager attention, and always on the CPU) the mode follows each batch exactly.

``OBSERVERS`` (callables taking ``(mode, rows, rerouted_rows)``) see every router call: a test hook.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

KNOB = "KIT_OEA_K0"
MODES = ("off", "all", "rows")
OBSERVERS: list[Callable[[str, int, int], None]] = []


class OeaConfigError(ValueError):
    """A bad ``KIT_OEA_K0`` or a model the hook cannot serve: the server must not start."""


def parse_k0(raw: str | None) -> int | None:
    """The knob's value: None when unset (baseline), else an integer >= 1. Strict: anything else is an error,
    never a silent baseline."""
    if raw is None:
        return None
    text = raw.strip()
    try:
        k0 = int(text, 10)
    except ValueError:
        raise OeaConfigError(f"{KNOB}={raw!r} is not an integer; unset it for the baseline, or give OEA's k0 "
                             "(1..top_k)") from None
    if k0 < 1:
        raise OeaConfigError(f"{KNOB}={raw!r}: k0 must be >= 1 (unset the variable for the baseline)")
    return k0


def check_k0(k0: int, top_k: int) -> None:
    if not 1 <= k0 <= top_k:
        raise OeaConfigError(f"{KNOB}={k0}: k0 must be in [1, {top_k}] (the model routes {top_k} experts per token)")


def decode_rows(rows: Sequence[tuple[int, int, int]]) -> list[bool]:
    """Per request ``(query_length, past_length, prompt_length)``: is it a decode row?"""
    return [q == 1 and past >= prompt for q, past, prompt in rows]


@dataclass(frozen=True)
class Batch:
    """What ``prepare_batch_tensors`` saw: each request's decode flag and first token's offset."""

    decode: tuple[bool, ...]
    starts: tuple[int, ...]
    tokens: int


def classify(rows: Sequence[tuple[int, int, int]]) -> Batch:
    flags = decode_rows(rows)
    starts, total = [], 0
    for q, _, _ in rows:
        starts.append(total)
        total += q
    return Batch(tuple(flags), tuple(starts), total)


def batch_mode(batch: Batch | None, *, graphed: bool, block_table: bool) -> str | list[int]:
    """``"off"``, ``"all"``, or the token rows to reroute (a mixed batch without graphs)."""
    if graphed:
        return "all" if block_table else "off"
    if batch is None or not any(batch.decode):
        return "off"
    if all(batch.decode):
        return "all"
    return [s for s, d in zip(batch.starts, batch.decode, strict=True) if d]


class _State(threading.local):
    def __init__(self) -> None:
        self.pending: Batch | None = None
        self.mode: str | list[int] = "off"
        self.tokens = 0
        self.index: Any = None  # the ``rows`` mode's index tensor, made once per batch on the router's device


_STATE = _State()
_installed: int | None = None
_originals: list[tuple[Any, str, Any]] = []  # (class, method name, original) for uninstall()


def hook_path() -> None:
    """Make ``kit_oea`` importable: beside ``kit_hf`` (the image) or in the checkout's images/oea."""
    here = Path(__file__).resolve().parent.parent
    for d in (here, here.parent / "oea"):
        if (d / "kit_oea" / "hf.py").is_file():
            if str(d) not in sys.path:
                sys.path.append(str(d))
            return


def _reroute(router: Any, out: tuple[Any, Any, Any], k0: int,
             reroute_router_output: Callable[..., tuple[Any, Any, Any]]) -> tuple[Any, Any, Any]:
    import torch

    logits, weights, ids = out
    mode, m = _STATE.mode, logits.shape[0]
    if mode == "off":
        _observe("off", m, 0)
        return out
    if mode == "all" and _STATE.tokens in (0, m):  # 0: a graphed batch (its real size is not known here)
        _observe("all", m, m)
        return reroute_router_output(logits, weights, ids, k0=k0, norm_topk_prob=router.norm_topk_prob)
    # rows: a mixed batch, or padded rows past the real tokens (eager padding): reroute the rows that count
    rows = list(range(_STATE.tokens)) if mode == "all" else mode
    if _STATE.index is None or _STATE.index.device != logits.device:
        _STATE.index = torch.tensor(rows, dtype=torch.long, device=logits.device)
    idx = _STATE.index
    _, sub_w, sub_ids = reroute_router_output(logits[idx], weights[idx], ids[idx], k0=k0,
                                              norm_topk_prob=router.norm_topk_prob)
    _observe("rows", m, len(rows))
    return logits, weights.index_copy(0, idx, sub_w), ids.index_copy(0, idx, sub_ids)


def _observe(mode: str, rows: int, rerouted: int) -> None:
    for fn in OBSERVERS:
        fn(mode, rows, rerouted)


def install(k0: int) -> None:
    """Patch transformers (idempotent for the same k0). ``check_model`` validates k0 against each loaded model."""
    global _installed
    if _installed is not None:
        if _installed != k0:
            raise OeaConfigError(f"OEA is already installed with k0={_installed}, not {k0}")
        return
    hook_path()
    from kit_oea.hf import reroute_router_output  # the shared hook: fail here, not in the generation loop
    from transformers.generation.continuous_batching.input_outputs import ContinuousBatchingIOs
    from transformers.generation.continuous_batching.model_runner import ModelRunner
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    prepare, compute, route = (ContinuousBatchingIOs.prepare_batch_tensors, ModelRunner.compute_batch,
                               Qwen3MoeTopKRouter.forward)

    def prepare_batch_tensors(self: Any, requests_in_batch: Any, *args: Any, **kwargs: Any) -> Any:
        _STATE.pending = classify([(fs.query_length, fs.state.position_offset, len(fs.state.initial_tokens))
                                   for fs in requests_in_batch or ()])
        return prepare(self, requests_in_batch, *args, **kwargs)

    def compute_batch(self: Any, model: Any, batch_data: dict[str, Any]) -> Any:
        block_table = bool(self.inputs_and_outputs.use_block_table)
        _, graphed = self._get_forward_fn(use_block_table=block_table)
        batch, _STATE.pending = _STATE.pending, None
        _STATE.mode = batch_mode(batch, graphed=bool(graphed), block_table=block_table)
        _STATE.tokens = 0 if batch is None or graphed else batch.tokens
        _STATE.index = None
        try:
            return compute(self, model, batch_data)
        finally:
            _STATE.mode, _STATE.tokens, _STATE.index = "off", 0, None

    def forward(self: Any, hidden_states: Any) -> Any:
        return _reroute(self, route(self, hidden_states), k0, reroute_router_output)

    for cls, name, new in ((ContinuousBatchingIOs, "prepare_batch_tensors", prepare_batch_tensors),
                           (ModelRunner, "compute_batch", compute_batch), (Qwen3MoeTopKRouter, "forward", forward)):
        _originals.append((cls, name, cls.__dict__[name]))
        setattr(cls, name, new)
    _installed = k0


def uninstall() -> None:
    """Put transformers' own methods back (tests run baseline and OEA in one process)."""
    global _installed
    while _originals:
        cls, name, original = _originals.pop()
        setattr(cls, name, original)
    _installed = None


def check_model(model: Any, k0: int) -> int:
    """Refuse a model the hook does not reach (no Qwen3-MoE router) or whose top-k is below k0; return the
    number of routers that will run OEA."""
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    routers = [m for m in model.modules() if isinstance(m, Qwen3MoeTopKRouter)]
    if not routers:
        raise OeaConfigError(f"{KNOB}={k0}: the model ({type(model).__name__}) has no Qwen3MoeTopKRouter; the kit "
                             "OEA hook only reaches Qwen3-MoE routers")
    for r in routers:
        check_k0(k0, int(r.top_k))
    return len(routers)


def k0_from_env() -> int | None:
    return parse_k0(os.environ.get(KNOB))
