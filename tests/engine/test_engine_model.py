"""The numpy MoE model (kit/engine/model.py), tokenizer and metrics, without HTTP."""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest

from kit.engine.config import ModelConfig
from kit.engine.metrics import EngineMetrics
from kit.engine.model import MoEModel, rmsnorm
from kit.engine.routing import oea_route, topk_route, unique_experts
from kit.engine.tokenizer import decode_token, encode

SMALL = ModelConfig(experts=16, top_k=4, layers=2, hidden=64, expert_ffn=32, vocab=128)


@pytest.fixture(scope="module")
def model() -> MoEModel:
    return MoEModel(SMALL)


def generate(m: MoEModel, prompts: list[list[int]], steps: int) -> np.ndarray:
    res = m.prefill(prompts)
    out = [res.next_tokens]
    for _ in range(steps):
        res = m.decode(out[-1], res.state)
        out.append(res.next_tokens)
    return np.stack(out, axis=1)


def test_same_seed_same_weights_and_tokens(model: MoEModel) -> None:
    again = MoEModel(SMALL)
    assert np.array_equal(model.w1, again.w1) and np.array_equal(model.router_bias, again.router_bias)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8]]
    assert np.array_equal(generate(model, prompts, 12), generate(again, prompts, 12))
    other = MoEModel(dataclasses.replace(SMALL, seed=1))
    assert not np.array_equal(model.w1, other.w1)


def test_default_sizes() -> None:
    cfg = ModelConfig()
    assert cfg.expert_bytes == 1 << 20
    assert cfg.layers * cfg.experts * cfg.expert_bytes == 256 << 20


def test_generation_is_not_degenerate(model: MoEModel) -> None:
    toks = generate(model, [[i, i + 1, i + 2] for i in range(8)], 40)
    assert toks.min() >= 0 and toks.max() < SMALL.vocab
    assert np.mean([len(set(row.tolist())) for row in toks]) > 10  # not stuck on one token


def test_prefill_matches_token_by_token_decode(model: MoEModel) -> None:
    prompt = [5, 17, 99, 3, 42, 7]
    pre = model.prefill([prompt])
    state = model.new_state(1)
    for tok in prompt:  # decode with plain top-k routing, one prompt token at a time
        step = model.decode(np.array([tok]), state)
        state = step.state
    np.testing.assert_allclose(pre.state, state, rtol=1e-4, atol=1e-5)
    assert pre.next_tokens.tolist() == step.next_tokens.tolist()


def test_packed_prefill_equals_separate_prefills(model: MoEModel) -> None:
    prompts = [[1, 2, 3, 4], [9], [7, 8, 9, 10, 11, 12]]
    packed = model.prefill(prompts)
    for i, prompt in enumerate(prompts):
        alone = model.prefill([prompt])
        np.testing.assert_allclose(packed.state[i], alone.state[0], rtol=1e-4, atol=1e-5)
        assert packed.next_tokens[i] == alone.next_tokens[0]
    assert packed.tokens == sum(len(p) for p in prompts)


def test_moe_matches_dense_reference(model: MoEModel) -> None:
    rng = np.random.default_rng(0)
    x = rmsnorm(rng.normal(size=(9, SMALL.hidden)).astype(np.float32))
    scores = rng.random((9, SMALL.experts)).astype(np.float32)
    for ids, w in (topk_route(scores, 4), oea_route(scores, 4, 2)):
        out, n_unique = model._moe(0, x, ids, w)
        ref = np.zeros_like(x)
        for t in range(x.shape[0]):
            for e, weight in zip(ids[t], w[t], strict=True):
                hidden = np.maximum(x[t] @ model.w1[0, e], 0)
                ref[t] += weight * (hidden @ model.w2[0, e])
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
        assert n_unique == unique_experts(ids, w)


def test_unique_experts_reported_per_layer() -> None:
    base = MoEModel(ModelConfig(experts=64, top_k=8, layers=3, hidden=32, expert_ffn=16, vocab=64))
    oea = MoEModel(dataclasses.replace(base.cfg, oea_k0=4))
    prompts = [[i, i + 3] for i in range(16)]
    # batch 1: top-8 touches 8 experts per layer, OEA exactly its top-4
    assert base.decode(np.array([1]), base.new_state(1)).unique_experts == [8, 8, 8]
    assert oea.decode(np.array([1]), oea.new_state(1)).unique_experts == [4, 4, 4]
    # batch 16: same router inputs on the first layer, so OEA's count is the union of the top-4 sets
    b = base.prefill(prompts)
    o = oea.prefill(prompts)
    assert np.array_equal(b.next_tokens, o.next_tokens)  # prefill is plain top-k in both
    step_b = base.decode(b.next_tokens, b.state)
    step_o = oea.decode(o.next_tokens, o.state)
    assert len(step_b.unique_experts) == 3
    assert step_o.unique_experts[0] < step_b.unique_experts[0]
    assert all(0 < u <= 64 for u in step_b.unique_experts + step_o.unique_experts)


def test_decode_rejects_bad_shapes(model: MoEModel) -> None:
    with pytest.raises(ValueError):
        model.decode(np.array([1, 2]), model.new_state(1))
    with pytest.raises(ValueError):
        model.prefill([[]])


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        ModelConfig(top_k=9, experts=8).validate()
    with pytest.raises(ValueError):
        ModelConfig(oea_k0=9).validate()


def test_tokenizer() -> None:
    assert encode("hello  world\nhello", 1024) == [zlib.crc32(b"hello") % 1024, zlib.crc32(b"world") % 1024,
                                                  zlib.crc32(b"hello") % 1024]
    assert encode("   ", 1024) == []
    assert decode_token(17) == " w17"


def test_metrics_render() -> None:
    m = EngineMetrics(layers=2, info={"oea_k0": "4", "top_k": "8", "experts": "64"})
    m.record_decode(3, 0.25, [5, 7])
    m.record_decode(2, 0.5, [4, 6])
    m.record_prefill(10, 0.1)
    text = m.render()
    samples = dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))
    assert samples['kit_engine_steps_total{phase="decode"}'] == "2"
    assert samples['kit_engine_steps_total{phase="prefill"}'] == "1"
    assert samples["kit_engine_decode_tokens_total"] == "5"
    assert samples["kit_engine_batch_size_sum"] == "5" and samples["kit_engine_batch_size_count"] == "2"
    assert samples['kit_engine_unique_experts_sum{layer="1"}'] == "13"
    assert samples['kit_engine_unique_experts_count{layer="0"}'] == "2"
    assert samples["kit_engine_step_seconds_sum"] == "0.75"
    assert samples['kit_engine_info{oea_k0="4",top_k="8",experts="64"}'] == "1"
    assert "# TYPE kit_engine_steps_total counter" in text


def test_bench_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from kit.engine import bench

    assert bench.main(["--batches", "1,3", "--steps", "2", "--experts", "16", "--expert-ffn", "16",
                       "--layers", "1", "--prompt-tokens", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-2].split()[0] == "1" and out[-1].split()[0] == "3"
