"""kit_oea (the torch OEA step that goes into the sglang image) against kit's numpy reference.

Covers the pure form ``oea_route_torch`` on the shared vectors and on random batches, the in-place
sglang hook ``oea_reroute_`` on sglang-shaped inputs (int32 ids, fp32 weights, GLM-5 sigmoid + bias with
a folded routed scale and a fused shared column, Qwen3 softmax), padded and ``-1`` rows, and a CPU check
that the hook has no host syncs or data-dependent shapes (run on meta tensors under an op spy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (pip install torch==2.13.0, the CPU build)")

from kit_oea.oea import layer_k0, oea_reroute_, oea_route_torch, parse_k0  # noqa: E402
from oea_helpers import ROOT, reference  # noqa: E402
from sync_spy import host_sync_problems  # noqa: E402

from kit.engine.routing import oea_route  # noqa: E402

VECTORS = ROOT / "tests" / "data" / "oea_vectors.json"


# ---------------------------------------------------------------- references


def baseline_topk(rank: torch.Tensor, scores: torch.Tensor, k: int, renormalize: bool, scale: float | None) -> Any:
    """sglang's plain routing: top-k by rank, weights = unbiased scores (renormalised, scaled)."""
    ids = torch.sort(rank, dim=1, descending=True, stable=True).indices[:, :k]
    w = scores.gather(1, ids)
    if renormalize:
        w = w / w.sum(dim=1, keepdim=True)
    return ids.to(torch.int32), w * (1.0 if scale is None else scale)


def sglang_inputs(
    m: int, n: int, k: int, *, shared: int, scoring: str, bias: bool, scale: float | None, seed: int = 0
) -> SimpleNamespace:
    """Router logits plus the top-k output sglang would hand to the hook (routed columns then shared)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, n, generator=gen) * 2
    corr = torch.randn(n, generator=gen) * 0.3 if bias else None
    scores = torch.softmax(logits, dim=-1) if scoring == "softmax" else torch.sigmoid(logits)
    rank = scores if corr is None else scores + corr
    ids, w = baseline_topk(rank, scores, k, renormalize=True, scale=scale)
    shared_ids = torch.full((m, shared), n, dtype=torch.int32)
    shared_w = torch.full((m, shared), 0.4)
    return SimpleNamespace(
        logits=logits,
        corr=corr,
        scores=scores,
        rank=rank,
        ids=torch.cat([ids, shared_ids], dim=1).contiguous(),
        weights=torch.cat([w, shared_w], dim=1).contiguous(),
    )


def reroute(x: SimpleNamespace, *, k: int, k0: int, scoring: str, renormalize: bool = True, **kw: Any) -> None:
    oea_reroute_(
        x.ids,
        x.weights,
        x.logits,
        k0=k0,
        k=k,
        scoring_func=scoring,
        correction_bias=x.corr,
        renormalize=renormalize,
        routed_scaling_factor=kw.get("scale"),
        num_token_non_padded=kw.get("ntnp"),
    )


# ---------------------------------------------------------------- shared vectors


def _vector_cases() -> list[Any]:
    if not VECTORS.is_file():
        return [pytest.param(None, id="missing")]
    data = json.loads(VECTORS.read_text(encoding="utf-8"))
    return [pytest.param(case, id=str(case.get("name", i))) for i, case in enumerate(data["cases"])]


@pytest.mark.parametrize("case", _vector_cases())
def test_shared_vectors_match_numpy_reference(case: dict[str, Any] | None) -> None:
    """Identical ids and weights (1e-6) to the vectors and to kit.engine.routing.oea_route, every case."""
    assert case is not None, f"{VECTORS} is missing (kit's shared OEA test vectors)"
    scores = np.asarray(case["scores"], dtype=np.float64).astype(np.float32)
    valid = np.asarray(case["valid"], dtype=bool)
    k, k0 = int(case["k"]), int(case["k0"])
    assert scores.shape == (case["batch"], case["num_experts"])
    np_ids, np_w = oea_route(scores, k, k0, valid)
    ids, w = oea_route_torch(torch.from_numpy(scores), k, k0, torch.from_numpy(valid))
    assert ids.dtype == torch.int64 and w.dtype == torch.float32 and tuple(ids.shape) == (case["batch"], k)
    np.testing.assert_array_equal(ids.numpy(), np.asarray(case["expected_ids"]))
    np.testing.assert_array_equal(ids.numpy(), np_ids)
    np.testing.assert_allclose(w.numpy(), np.asarray(case["expected_weights"]), rtol=0, atol=1e-6)
    np.testing.assert_allclose(w.numpy(), np_w, rtol=0, atol=1e-6)
    assert np.unique(ids.numpy()[valid]).size == case["expected_active_experts"]


def test_shared_vectors_cover_the_promised_cases() -> None:
    cases = json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]
    assert any(not all(c["valid"]) for c in cases), "padded rows (-1 ids)"
    assert any(not any(c["valid"]) for c in cases), "an all-padded batch"
    assert {1, 1024} <= {c["batch"] for c in cases}


# ---------------------------------------------------------------- pure form vs numpy, random batches


@pytest.mark.parametrize(
    ("batch", "n", "k", "k0"),
    [(1, 256, 8, 4), (2, 16, 4, 1), (7, 128, 8, 3), (16, 256, 8, 4), (64, 64, 6, 6), (1024, 256, 8, 4)],
)
def test_random_batches_match_numpy(batch: int, n: int, k: int, k0: int) -> None:
    rng = np.random.default_rng(batch * 1000 + n)
    scores = rng.random((batch, n)).astype(np.float32)
    scores[:, 1:4] = scores[:, :1]  # exact ties: the lower index must win, as in numpy's stable sort
    scores /= scores.sum(axis=1, keepdims=True)
    for valid in (None, rng.random(batch) > 0.25, np.zeros(batch, dtype=bool)):
        np_ids, np_w = oea_route(scores, k, k0, valid)
        tv = None if valid is None else torch.from_numpy(valid)
        ids, w = oea_route_torch(torch.from_numpy(scores), k, k0, tv)
        np.testing.assert_array_equal(ids.numpy(), np_ids)
        np.testing.assert_allclose(w.numpy(), np_w, rtol=0, atol=1e-6)


def test_pure_form_rejects_bad_arguments() -> None:
    s = torch.rand(4, 8)
    with pytest.raises(ValueError, match="k0 must be"):
        oea_route_torch(s, 4, 5)
    with pytest.raises(ValueError, match="k must be"):
        oea_route_torch(s, 9, 1)
    with pytest.raises(ValueError, match="2-D"):
        oea_route_torch(s[0], 4, 2)
    with pytest.raises(ValueError, match="valid must have shape"):
        oea_route_torch(s, 4, 2, torch.ones(3, dtype=torch.bool))


# ---------------------------------------------------------------- the in-place sglang hook

GLM5 = {"n": 256, "k": 8, "shared": 1, "scoring": "sigmoid", "bias": True, "scale": 2.5}
QWEN3 = {"n": 128, "k": 8, "shared": 0, "scoring": "softmax", "bias": False, "scale": None}


@pytest.mark.parametrize(
    ("model", "k0"), [(GLM5, 4), (GLM5, 1), (QWEN3, 3), (QWEN3, 5)], ids=["glm5-4", "glm5-1", "qwen3-3", "qwen3-5"]
)
@pytest.mark.parametrize("m", [1, 16, 64])
def test_reroute_in_place_matches_reference(model: dict[str, Any], k0: int, m: int) -> None:
    k, scale = model["k"], model["scale"]
    x = sglang_inputs(
        m, model["n"], k, shared=model["shared"], scoring=model["scoring"], bias=model["bias"], scale=scale
    )
    ids_ptr, w_ptr = x.ids.data_ptr(), x.weights.data_ptr()
    shared_before = (x.ids[:, k:].clone(), x.weights[:, k:].clone())
    reroute(x, k=k, k0=k0, scoring=model["scoring"], scale=scale)
    assert (x.ids.data_ptr(), x.weights.data_ptr()) == (ids_ptr, w_ptr)
    assert (x.ids.dtype, x.weights.dtype) == (torch.int32, torch.float32)
    assert torch.equal(x.ids[:, k:], shared_before[0]) and torch.equal(x.weights[:, k:], shared_before[1])
    want_ids, want_w = reference(x.rank.numpy(), x.scores.numpy(), k, k0, np.ones(m, bool), scale=scale)
    np.testing.assert_array_equal(x.ids[:, :k].numpy(), want_ids)
    np.testing.assert_allclose(x.weights[:, :k].numpy(), want_w, rtol=0, atol=1e-6)
    assert (x.ids[:, :k] >= 0).all()
    np.testing.assert_allclose(x.weights[:, :k].sum(1).numpy(), scale or 1.0, rtol=1e-5)


def test_qwen3_softmax_hook_equals_kit_reference() -> None:
    x = sglang_inputs(16, 128, 8, shared=0, scoring="softmax", bias=False, scale=None)
    reroute(x, k=8, k0=3, scoring="softmax")
    np_ids, np_w = oea_route(x.scores.numpy(), 8, 3)
    np.testing.assert_array_equal(x.ids.numpy(), np_ids)
    np.testing.assert_allclose(x.weights.numpy(), np_w, rtol=0, atol=1e-6)


def test_bias_ranks_but_does_not_weigh() -> None:
    """noaux_tc: a large bias on one expert puts it in every row, with its unbiased (tiny) score as weight."""
    x = sglang_inputs(8, 64, 4, shared=0, scoring="sigmoid", bias=True, scale=None)
    x.logits[:, 5] = -8.0
    x.corr = torch.zeros(64)
    x.corr[5] = 10.0
    reroute(x, k=4, k0=2, scoring="sigmoid")
    assert (x.ids[:, 0] == 5).all()
    s = torch.sigmoid(x.logits)
    kept = x.weights > 0
    expected = s[:, 5] / (s.gather(1, x.ids.long()) * kept).sum(1)
    torch.testing.assert_close(x.weights[:, 0], expected)
    assert (x.weights[:, 0] < 0.01).all()


@pytest.mark.parametrize("shape", [(), (1,)], ids=["scalar", "vector1"])
def test_padded_rows_stay_out_of_the_union(shape: tuple[int, ...]) -> None:
    full = sglang_inputs(16, 256, 8, shared=1, scoring="sigmoid", bias=True, scale=2.5)
    head = sglang_inputs(16, 256, 8, shared=1, scoring="sigmoid", bias=True, scale=2.5)
    head.logits, head.ids, head.weights = head.logits[:10].clone(), head.ids[:10].clone(), head.weights[:10].clone()
    reroute(full, k=8, k0=4, scoring="sigmoid", scale=2.5, ntnp=torch.full(shape, 10, dtype=torch.int32))
    reroute(head, k=8, k0=4, scoring="sigmoid", scale=2.5)
    assert torch.equal(full.ids[:10], head.ids) and torch.equal(full.weights[:10], head.weights)
    assert (full.ids[10:, :8] == -1).all() and (full.weights[10:, :8] == 0).all()
    assert (full.ids[10:, 8:] == 256).all(), "shared columns of padded rows are untouched"


def test_incoming_minus_one_rows_stay_minus_one() -> None:
    x = sglang_inputs(12, 128, 8, shared=0, scoring="softmax", bias=False, scale=None)
    x.ids[[3, 7]] = -1
    x.ids[5, 2:] = -1  # a partly masked row still carries a token
    kept = [i for i in range(12) if i not in (3, 7)]
    y = sglang_inputs(12, 128, 8, shared=0, scoring="softmax", bias=False, scale=None)
    y.logits, y.ids, y.weights = y.logits[kept].clone(), y.ids[kept].clone(), y.weights[kept].clone()
    reroute(x, k=8, k0=2, scoring="softmax")
    reroute(y, k=8, k0=2, scoring="softmax")
    assert (x.ids[[3, 7]] == -1).all() and (x.weights[[3, 7]] == 0).all()
    assert torch.equal(x.ids[kept], y.ids) and torch.equal(x.weights[kept], y.weights)
    assert (x.ids[5] >= 0).all()


def test_small_active_set_fills_with_top1_weight_zero() -> None:
    """Batch 1: |S| = k0 < k, so the last k - k0 slots repeat the token's top-1 with weight 0, never -1."""
    x = sglang_inputs(1, 256, 8, shared=1, scoring="sigmoid", bias=True, scale=2.5)
    top1 = int(torch.argmax(x.rank[0]))
    reroute(x, k=8, k0=3, scoring="sigmoid", scale=2.5)
    assert x.ids[0, 0] == top1 and (x.ids[0, 3:8] == top1).all()
    assert (x.weights[0, 3:8] == 0).all() and (x.weights[0, :3] > 0).all()
    assert abs(float(x.weights[0, :8].sum()) - 2.5) < 1e-5


def test_k0_equal_k_reproduces_plain_routing() -> None:
    x = sglang_inputs(32, 256, 8, shared=1, scoring="sigmoid", bias=True, scale=2.5)
    before_ids, before_w = x.ids.clone(), x.weights.clone()
    reroute(x, k=8, k0=8, scoring="sigmoid", scale=2.5)
    assert torch.equal(x.ids, before_ids)
    torch.testing.assert_close(x.weights, before_w)


def test_renormalize_off_keeps_raw_scores() -> None:
    x = sglang_inputs(8, 64, 6, shared=0, scoring="sigmoid", bias=False, scale=None)
    reroute(x, k=6, k0=2, scoring="sigmoid", renormalize=False)
    s = torch.sigmoid(x.logits).gather(1, x.ids.long())
    kept = x.weights > 0
    torch.testing.assert_close(x.weights[kept], s[kept])


def test_bf16_logits_and_empty_batch() -> None:
    x = sglang_inputs(16, 256, 8, shared=0, scoring="sigmoid", bias=True, scale=None)
    logits = x.logits.to(torch.bfloat16)
    oea_reroute_(x.ids, x.weights, logits, k0=4, k=8, scoring_func="sigmoid", correction_bias=x.corr,
                 renormalize=True, routed_scaling_factor=None, num_token_non_padded=None)  # fmt: skip
    s = torch.sigmoid(logits.float())
    want_ids, want_w = reference((s + x.corr).numpy(), s.numpy(), 8, 4, np.ones(16, bool))
    np.testing.assert_array_equal(x.ids.numpy(), want_ids)
    np.testing.assert_allclose(x.weights.numpy(), want_w, rtol=0, atol=1e-6)
    empty_ids, empty_w = torch.empty(0, 8, dtype=torch.int32), torch.empty(0, 8)
    oea_reroute_(empty_ids, empty_w, torch.empty(0, 256), k0=4, k=8, scoring_func="sigmoid", correction_bias=None,
                 renormalize=True, routed_scaling_factor=None, num_token_non_padded=None)  # fmt: skip


def test_hook_rejects_bad_arguments() -> None:
    x = sglang_inputs(4, 32, 4, shared=0, scoring="softmax", bias=False, scale=None)
    with pytest.raises(ValueError, match="k0 must be"):
        reroute(x, k=4, k0=5, scoring="softmax")
    with pytest.raises(ValueError, match="topk_ids must be"):
        reroute(x, k=5, k0=2, scoring="softmax")
    with pytest.raises(ValueError, match="scoring_func"):
        reroute(x, k=4, k0=2, scoring="sqrtsoftplus")


# ---------------------------------------------------------------- CUDA-graph safety, checked on the CPU


def _meta_hook_args(m: int, *, bias: bool, ntnp: bool) -> tuple[tuple[Any, ...], dict[str, Any]]:
    meta = torch.device("meta")
    args = (
        torch.empty(m, 9, dtype=torch.int32, device=meta),
        torch.empty(m, 9, dtype=torch.float32, device=meta),
        torch.empty(m, 256, dtype=torch.bfloat16, device=meta),
    )
    kwargs = {
        "k0": 4,
        "k": 8,
        "scoring_func": "sigmoid",
        "correction_bias": torch.empty(256, device=meta) if bias else None,
        "renormalize": True,
        "routed_scaling_factor": 2.5,
        "num_token_non_padded": torch.empty((), dtype=torch.int32, device=meta) if ntnp else None,
    }
    return args, kwargs


@pytest.mark.parametrize(("bias", "ntnp"), [(True, True), (False, False), (True, False)])
@pytest.mark.parametrize("m", [1, 16, 512])
def test_hook_has_no_host_sync_or_dynamic_shape(m: int, bias: bool, ntnp: bool) -> None:
    args, kwargs = _meta_hook_args(m, bias=bias, ntnp=ntnp)
    problems, ops = host_sync_problems(oea_reroute_, *args, **kwargs)
    assert problems == []
    assert {"sort", "index_fill_", "topk", "gather", "copy_"} <= set(ops), ops
    assert "where" in ops, "the skip rule (on by default) runs on the device, as a torch.where"


def test_pure_form_has_no_host_sync() -> None:
    meta = torch.device("meta")
    valid = torch.empty(64, dtype=torch.bool, device=meta)
    problems, _ = host_sync_problems(oea_route_torch, torch.empty(64, 256, device=meta), 8, 4, valid)
    assert problems == []


def _item(t: torch.Tensor) -> None:
    t[: int(t.sum().item())] = 0


def _tolist(t: torch.Tensor) -> None:
    t.sum(0).tolist()


def _truth(t: torch.Tensor) -> None:
    if (t > 0).any():
        t.zero_()


def _mask_read(t: torch.Tensor) -> None:
    t[t > 0].sum()


def _mask_write(t: torch.Tensor) -> None:
    t[t > 0] = 0.0


def _scalar_index_put(t: torch.Tensor) -> None:
    idx = torch.zeros(2, dtype=torch.long, device=t.device)
    flags = torch.zeros(t.shape[0], dtype=torch.bool, device=t.device)
    flags[idx] = True  # the pattern that fails under CUDA graph capture


def _to_cpu(t: torch.Tensor) -> None:
    t.cpu()


def _host_tensor(t: torch.Tensor) -> None:
    t + torch.tensor([1.0])


def _nonzero(t: torch.Tensor) -> None:
    torch.nonzero(t)


@pytest.mark.parametrize(
    "offender",
    [_item, _tolist, _truth, _mask_read, _mask_write, _scalar_index_put, _to_cpu, _host_tensor, _nonzero],
)
def test_sync_spy_catches_known_offenders(offender: Any) -> None:
    """The check above can fail: each of these patterns is reported."""
    problems, _ = host_sync_problems(offender, torch.empty(8, 4, device="meta"))
    assert problems, f"{offender.__name__} was not flagged"


def test_hook_traces_as_one_graph_under_torch_compile() -> None:
    """sglang may torch.compile the routing path; dynamo must trace the hook without a graph break."""
    x = sglang_inputs(16, 256, 8, shared=1, scoring="sigmoid", bias=True, scale=2.5)
    y = sglang_inputs(16, 256, 8, shared=1, scoring="sigmoid", bias=True, scale=2.5)
    ntnp = torch.tensor(12, dtype=torch.int32)

    def hook(ids: torch.Tensor, w: torch.Tensor, logits: torch.Tensor, corr: torch.Tensor, n: torch.Tensor) -> None:
        oea_reroute_(ids, w, logits, k0=4, k=8, scoring_func="sigmoid", correction_bias=corr, renormalize=True,
                     routed_scaling_factor=2.5, num_token_non_padded=n)  # fmt: skip

    torch._dynamo.reset()
    torch.compile(hook, fullgraph=True, backend="eager")(x.ids, x.weights, x.logits, x.corr, ntnp)
    hook(y.ids, y.weights, y.logits, y.corr, ntnp)
    assert torch.equal(x.ids, y.ids) and torch.equal(x.weights, y.weights)


# ---------------------------------------------------------------- per-layer validation of the knob


def topk_config(**over: Any) -> SimpleNamespace:
    base = {
        "layer_id": 3,
        "top_k": 9,
        "num_shared_topk_slots": 1,
        "custom_routing_function": None,
        "scoring_func": "sigmoid",
        "sqrtsoftplus_log1p": False,
        "use_grouped_topk": True,
        "num_expert_group": 1,
        "topk_group": 1,
    }
    return SimpleNamespace(**{**base, **over})


def test_layer_k0_accepts_glm5_and_qwen3_layers() -> None:
    assert layer_k0(topk_config(), "4") == 4
    assert layer_k0(topk_config(), "8") == 8
    assert layer_k0(topk_config(), "0") == 0
    assert layer_k0(topk_config(), "") == 0
    qwen3 = topk_config(top_k=8, num_shared_topk_slots=0, scoring_func="softmax", use_grouped_topk=False)
    assert layer_k0(qwen3, " 3 ") == 3
    assert layer_k0(topk_config(num_expert_group=8, topk_group=8), "4") == 4


def test_layer_k0_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_OEA_K0", "5")
    assert layer_k0(topk_config()) == 5
    monkeypatch.delenv("SGLANG_OEA_K0")
    assert layer_k0(topk_config()) == 0


@pytest.mark.parametrize(
    ("over", "raw", "match"),
    [
        ({}, "9", r"k0 must be in \[1, 8\]"),
        ({"scoring_func": "sqrtsoftplus"}, "4", "scoring_func 'sqrtsoftplus'"),
        ({"sqrtsoftplus_log1p": True}, "4", "scoring_func"),
        ({"custom_routing_function": print}, "4", "custom_routing_function"),
        ({"num_expert_group": 8, "topk_group": 4}, "4", "group limits"),
        ({}, "four", "is not an integer"),
        ({}, "-1", "must be >= 0"),
    ],
)
def test_layer_k0_refuses_what_the_hook_cannot_serve(over: dict[str, Any], raw: str, match: str) -> None:
    with pytest.raises(ValueError, match=match) as info:
        layer_k0(topk_config(**over), raw)
    assert "SGLANG_OEA_K0" in str(info.value)


def test_parse_k0() -> None:
    assert parse_k0("") == 0 and parse_k0("  ") == 0 and parse_k0("7") == 7


# ---------------------------------------------------------------- implementation choice


def test_cpu_tensors_take_the_torch_ops() -> None:
    from kit_oea import oea

    x = sglang_inputs(4, 32, 4, shared=0, scoring="softmax", bias=False, scale=None)
    assert oea._fused_module(x.logits, x.ids, x.weights, None) is None


@pytest.mark.parametrize(("value", "ok"), [("triton", True), ("cuda", False)])
@pytest.mark.slow  # seconds of subprocesses or plots: the slow tier (unit tier budget, issue 21)
def test_impl_knob_is_checked_at_import(value: str, ok: bool) -> None:
    code = "import kit_oea.oea as m; print(m.IMPL)"
    env = {**os.environ, "KIT_OEA_IMPL": value, "PYTHONPATH": str(ROOT / "images" / "oea")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert (proc.returncode == 0) is ok, proc.stderr
    if ok:
        assert proc.stdout.strip() == (value or "auto")
    else:
        assert "KIT_OEA_IMPL='cuda'" in proc.stderr
