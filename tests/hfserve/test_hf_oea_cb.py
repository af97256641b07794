"""The OEA hook inside transformers' real continuous-batching loop (``generate_batch``, the manager
``transformers serve --continuous-batching`` runs), on the tiny model on the CPU.

Prompts of different lengths with a small token budget per batch make the scheduler produce every kind of
batch: prefill only, chunked prefill, decode only, and decode rows mixed with prefill rows. A test-only
observer counts the router calls per mode: OEA must reach the routers on decode tokens, and only there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers", reason="transformers is not installed (make test installs it)")
torch = pytest.importorskip("torch")

from kit_hf import oea_patch  # noqa: E402

K0 = 1
NEW_TOKENS = 10


@pytest.fixture
def model(tiny_model: Path) -> Any:
    return transformers.AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)


@pytest.fixture
def observed() -> Iterator[Counter[tuple[str, int, int]]]:
    calls: Counter[tuple[str, int, int]] = Counter()
    oea_patch.OBSERVERS.append(lambda mode, rows, rerouted: calls.update([(mode, rows, rerouted)]))
    yield calls
    oea_patch.OBSERVERS.clear()
    oea_patch.uninstall()


def generate(model: Any) -> list[list[int]]:
    prompts = [[(7 * i + j) % 1900 + 40 for j in range(3 + 11 * i)] for i in range(6)]  # 3 .. 58 tokens
    gen = transformers.GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=-1)
    cb = transformers.ContinuousBatchingConfig(num_blocks=32, max_batch_tokens=40)
    out = model.generate_batch(prompts, generation_config=gen, continuous_batching_config=cb,
                               max_new_tokens=NEW_TOKENS)
    return [list(o.generated_tokens) for o in out.values()]


def test_oea_reaches_the_router_on_decode_tokens_only(model: Any, observed: Counter[tuple[str, int, int]]) -> None:
    baseline = generate(model)
    assert not observed, "nothing is patched before install()"
    layers = model.config.num_hidden_layers
    oea_patch.install(K0)
    assert oea_patch.check_model(model, K0) == layers
    rerouted = generate(model)

    assert all(len(t) == NEW_TOKENS for t in baseline + rerouted)
    assert rerouted != baseline, "OEA with k0=1 (top-1 on a lone decode token) changed no output"
    modes = Counter(mode for mode, _, _ in observed.elements())
    assert {"off", "all", "rows"} <= set(modes), modes  # prefill-only, decode-only and mixed batches all happened
    for (mode, rows, n), count in observed.items():
        assert count % layers == 0  # one call per MoE layer per forward pass
        if mode == "off":
            assert n == 0
        elif mode == "all":
            assert n == rows <= 6  # a decode-only batch: one token per running request
        else:
            assert 0 < n < rows  # a mixed batch: only its decode tokens
    # every generated token after a request's first came from a decode row: the decode tokens OEA saw add up
    decode_tokens = sum(n * count for (_, _, n), count in observed.items()) // layers
    assert decode_tokens == len(rerouted) * (NEW_TOKENS - 1)


def test_uninstall_restores_transformers(model: Any, observed: Counter[tuple[str, int, int]]) -> None:
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter

    original = Qwen3MoeTopKRouter.forward
    oea_patch.install(2)
    assert Qwen3MoeTopKRouter.forward is not original
    with pytest.raises(oea_patch.OeaConfigError, match="already installed"):
        oea_patch.install(3)
    with pytest.raises(oea_patch.OeaConfigError, match=r"\[1, 4\]"):
        oea_patch.check_model(model, 5)
    oea_patch.uninstall()
    assert Qwen3MoeTopKRouter.forward is original
