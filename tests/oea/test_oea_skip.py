"""The hook's skip rule: where the union of top-k0 already holds (nearly) every expert, plain routing stays.

The torch path (the reference, and the CPU path of ``oea_reroute_``) against the OEA spec in ``oea_helpers``
(plain Python) below the threshold and against the untouched plain top-k at and above it; the knob; and a
structural check that nothing on the hook's host path reads a tensor's value (the fused kernels' side is in
test_triton_oea.py, the captured-graph replay on a GPU in test_oea_gpu.py).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")

from kit_oea import oea  # noqa: E402
from oea_helpers import IMAGE_DIR, reference  # noqa: E402

N, K, K0 = 64, 8, 3


def union_case(m: int, union: int, seed: int) -> SimpleNamespace:
    """Sigmoid router inputs (a small correction bias) whose rows' top-k0 cover exactly ``union`` experts,
    and the plain top-k a router hands the hook (ids int32, weights renormalised and x2.5, a shared column)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, N, generator=gen) * 0.5
    prefer = (torch.arange(m)[:, None] * K0 + torch.arange(K0)[None, :]) % union
    logits.scatter_(1, prefer, 10.0 + torch.arange(K0, dtype=torch.float32).expand(m, K0))
    bias = torch.randn(N, generator=gen) * 1e-3
    scores = torch.sigmoid(logits)
    top = torch.sort(scores + bias, dim=1, descending=True, stable=True).indices[:, :K]
    w = scores.gather(1, top)
    ids = torch.cat([top.to(torch.int32), torch.full((m, 1), N, dtype=torch.int32)], dim=1)
    weights = torch.cat([w / w.sum(1, keepdim=True) * 2.5, torch.full((m, 1), 0.25)], dim=1)
    return SimpleNamespace(logits=logits, bias=bias, ids=ids, weights=weights)


def run(x: SimpleNamespace, **over: Any) -> tuple[torch.Tensor, torch.Tensor]:
    ids, weights = x.ids.clone(), x.weights.clone()
    kwargs: dict[str, Any] = {"k0": K0, "k": K, "scoring_func": "sigmoid", "correction_bias": x.bias,
                              "renormalize": True, "routed_scaling_factor": 2.5, "num_token_non_padded": None}  # fmt: skip
    kwargs.update(over)
    fn = oea.reroute_torch_ if "skip_at" in over else oea.oea_reroute_
    fn(ids, weights, x.logits, **kwargs)
    return ids, weights


def spec(x: SimpleNamespace) -> tuple[np.ndarray, np.ndarray]:
    scores = torch.sigmoid(x.logits)
    rank = (scores + x.bias).numpy()
    return reference(rank, scores.numpy(), K, K0, np.ones(len(rank), dtype=bool), scale=2.5)


@pytest.mark.parametrize("union", [59, 60, 61, 64])
def test_threshold_on_the_torch_path(union: int) -> None:
    """skip_at = 60 of 64: a union of 59 is OEA (the plain-Python spec); 60, 61 and 64 keep plain routing."""
    x = union_case(40, union, seed=union)
    ids, weights = run(x, skip_at=60)
    if union >= 60:
        assert torch.equal(ids, x.ids) and torch.equal(weights, x.weights)
        return
    spec_ids, spec_w = spec(x)
    assert np.array_equal(ids[:, :K].numpy(), spec_ids)
    assert np.allclose(weights[:, :K].numpy(), spec_w, atol=1e-6)
    assert torch.unique(ids[:, :K]).numel() == union
    assert not torch.equal(ids, x.ids)
    assert torch.equal(ids[:, K:], x.ids[:, K:]) and torch.equal(weights[:, K:], x.weights[:, K:])


def test_the_default_rule_through_the_hook_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset: skip at >= 64 - 64 // 64 = 63 experts; the knob moves the threshold or turns it off."""
    monkeypatch.delenv(oea.SKIP_KNOB, raising=False)
    at63, at62 = union_case(40, 63, seed=1), union_case(40, 62, seed=2)
    assert torch.equal(run(at63)[0], at63.ids)  # skipped
    assert np.array_equal(run(at62)[0][:, :K].numpy(), spec(at62)[0])  # rerouted
    monkeypatch.setenv(oea.SKIP_KNOB, "off")
    assert np.array_equal(run(at63)[0][:, :K].numpy(), spec(at63)[0])
    monkeypatch.setenv(oea.SKIP_KNOB, "2")
    assert torch.equal(run(at62)[0], at62.ids)


def test_k0_equal_k_with_a_full_union_is_plain_routing() -> None:
    """The control arm (k0 = k) where every expert is in the union: skipping changes nothing OEA would do."""
    x = union_case(64, 64, seed=3)
    x.logits = torch.randn(64, N, generator=torch.Generator().manual_seed(4)) * 2
    scores = torch.sigmoid(x.logits)
    top = torch.sort(scores + x.bias, dim=1, descending=True, stable=True).indices[:, :K]
    x.ids[:, :K] = top.to(torch.int32)
    rerouted, _ = run(x, k0=K, skip_at=None)
    skipped, _ = run(x, k0=K, skip_at=1)
    assert torch.equal(skipped, x.ids) and torch.equal(rerouted, x.ids)


def test_skip_knob_parsing_and_startup_check(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (oea.skip_at(256, ""), oea.skip_at(128, ""), oea.skip_at(16, ""), oea.skip_at(256, " OFF ")) == (
        252, 126, 16, None)  # fmt: skip
    assert (oea.skip_at(256, "0"), oea.skip_at(256, "255")) == (256, 1)
    for bad, why in (("x", "not an integer"), ("-1", "must be >= 0"), ("1.5", "not an integer")):
        with pytest.raises(ValueError, match=why):
            oea.skip_at(256, bad)
    with pytest.raises(ValueError, match="below the layer's 256 experts"):
        oea.skip_at(256, "256")
    config = SimpleNamespace(layer_id=3, top_k=9, num_shared_topk_slots=1, custom_routing_function=None,
                             scoring_func="sigmoid", sqrtsoftplus_log1p=False, use_grouped_topk=True,
                             num_expert_group=1, topk_group=1)  # fmt: skip
    monkeypatch.setenv(oea.SKIP_KNOB, "four")
    with pytest.raises(ValueError, match=r"MoE layer 3: KIT_OEA_SKIP_SLACK='four' is not an integer"):
        oea.layer_k0(config, "4")
    assert oea.layer_k0(config, "0") == 0  # OEA off: the skip knob is not read


# ------------------------------------------------ structural: no host read of a tensor on the hook's path

HOST_READS = {"item", "tolist", "cpu", "numpy", "nonzero", "synchronize", "equal", "allclose"}
VALUE_TESTS = HOST_READS | {"any", "all", "sum", "max", "min", "count_nonzero"}


def _functions() -> list[tuple[str, ast.FunctionDef]]:
    spec_ = {
        IMAGE_DIR / "kit_oea" / "oea.py": ("oea_reroute_", "reroute_torch_", "_select", "_weights",
                                            "_valid_rows", "_score", "skip_at", "parse_skip_slack", "_fused_module",
                                            "oea_prelaunch_"),
        IMAGE_DIR / "kit_oea" / "triton_oea.py": ("oea_reroute_triton_", "choose_path", "use_pdl", "_sms",
                                                   "supports", "_int_knob", "prelaunch_union", "join",
                                                   "_split_layout", "_prelaunch_path", "prelaunch_enabled",
                                                   "_launch_shape"),
    }  # fmt: skip
    found = []
    for path, names in spec_.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        defs = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert set(names) <= set(defs), set(names) - set(defs)
        found += [(f"{path.name}:{name}", defs[name]) for name in names]
    return found


def _attr_calls(node: ast.AST) -> set[str]:
    return {n.func.attr for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}


def test_no_host_read_of_a_tensor_on_the_hook_path() -> None:
    """No .item()/.tolist()/.cpu()/torch.equal... anywhere on the host path, and no if/while/assert/bool()
    whose test reduces a tensor: every value-dependent choice (the skip) is left to the device."""
    problems = []
    for where, fn in _functions():
        if bad := _attr_calls(fn) & HOST_READS:
            problems.append(f"{where} calls {sorted(bad)}")
        for node in ast.walk(fn):
            tests = []
            if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
                tests.append(node.test)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "bool":
                tests += node.args
            for test in tests:
                if bad := _attr_calls(test) & VALUE_TESTS:
                    problems.append(f"{where} line {test.lineno}: a branch on {sorted(bad)}")
    assert problems == []


def test_the_structural_check_catches_an_offender() -> None:
    """The same walk on a function that branches on a tensor value (the thing it must catch)."""

    def offender(t: Any) -> None:
        if t.sum() > 0:
            t.item()

    fn = ast.parse(textwrap.dedent(inspect.getsource(offender))).body[0]
    assert _attr_calls(fn) & HOST_READS == {"item"}
    assert isinstance(fn, ast.FunctionDef) and isinstance(fn.body[0], ast.If)
    assert _attr_calls(fn.body[0].test) & VALUE_TESTS == {"sum"}
