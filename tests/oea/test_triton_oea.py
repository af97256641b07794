"""kit_oea.triton_oea (the fused OEA kernels) against the torch reference ``reroute_torch_``.

Runs the Triton kernels on the CPU through Triton's interpreter (``TRITON_INTERPRET=1``, set only while
this file loads its own copy of the module) or compiled on a CUDA GPU when there is one. Both paths
(``single``: one program, union in registers; ``repl``: the same on a grid; ``split``: bit sets) are checked
on the same
inputs: exact ids, weights allclose, including batch 1, rows without a token (``-1`` ids, padding past
``num_token_non_padded``), heavy ties, an active set smaller than k, a fused shared column, int64 ids with
bf16 weights (the transformers layout) and strided logits. Skipped when Triton does not import.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (the kernels cannot run or be interpreted)", allow_module_level=True)

from kit_oea.oea import reroute_torch_  # noqa: E402
from oea_helpers import IMAGE_DIR, patch_triton_interpreter_scalars, reference  # noqa: E402

pytestmark = pytest.mark.slow  # ~11 s interpreted on 2 CPU cores

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
PATHS = ["single", "repl", "split", "split-light", "split-old"]
KERNELS = ("_union_kernel", "_part_kernel", "_light_part_kernel", "_split_select_kernel", "_repair_select_kernel")


def _load_kernels() -> ModuleType:
    """A private copy of triton_oea; on the CPU, interpreted. Triton reads TRITON_INTERPRET as each
    @triton.jit function is decorated, its own standard library included, so on the CPU triton must not
    have been imported before this module sets it."""
    before = os.environ.get("TRITON_INTERPRET")
    if DEVICE == "cpu":
        if "triton" in sys.modules and before != "1":
            pytest.skip("triton was imported before TRITON_INTERPRET could be set: run this file alone",
                        allow_module_level=True)  # fmt: skip
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton  # noqa: F401  (decorates triton.language's own jit functions under the setting above)

        if DEVICE == "cpu":
            patch_triton_interpreter_scalars()

        spec = importlib.util.spec_from_file_location(
            "kit_oea_triton_under_test", IMAGE_DIR / "kit_oea" / "triton_oea.py"
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        if before is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = before


TK = _load_kernels()


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's interpreter also reads the setting while it runs (it imports parts of triton lazily)."""
    if DEVICE == "cpu":
        monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(params=PATHS)
def path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv(TK.PATH_KNOB, request.param)
    yield request.param


def make(
    m: int, n: int, k: int, *, seed: int, bias: bool = False, shared: int = 0, ties: bool = False,
    minus_one_rows: tuple[int, ...] = (), ids_dtype: Any = None, w_dtype: Any = None,
) -> SimpleNamespace:  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    if ties:  # few distinct values: most comparisons are ties, broken by the lower expert index
        logits = torch.randint(0, 3, (m, n), generator=gen).float().to(torch.bfloat16)
    else:
        logits = (torch.randn(m, n, generator=gen) * 2).to(torch.bfloat16)
    ids = torch.randint(0, n, (m, k + shared), generator=gen, dtype=torch.int32)
    ids[:, k:] = n
    for row in minus_one_rows:
        ids[row, :k] = -1
    weights = torch.rand(m, k + shared, generator=gen)
    return SimpleNamespace(
        logits=logits,
        corr=(torch.randn(n, generator=gen) * 0.3) if bias else None,
        ids=ids.to(ids_dtype or torch.int32),
        weights=weights.to(w_dtype or torch.float32),
    )


def run_both(x: SimpleNamespace, *, k: int, k0: int, softmax: bool, renormalize: bool = True,
             scale: float | None = None, ntnp: int | None = None,
             skip_at: int | None = None) -> tuple[Any, Any, Any, Any]:  # fmt: skip
    """(reference ids, reference weights, kernel ids, kernel weights); the reference on int32/fp32 CPU copies.
    The incoming ids of every row that has one are first set to the row's plain top-k under the reference's
    own key (stable descending sort: ties to the lower index), the hook's contract (``x.ids`` in place)."""
    plain_top_k_(x, k=k, softmax=softmax)
    nt = None if ntnp is None else torch.tensor(ntnp, dtype=torch.int32)
    ref_ids, ref_w = x.ids.to(torch.int32).clone(), x.weights.float().clone()
    reroute_torch_(ref_ids, ref_w, x.logits, k0=k0, k=k, scoring_func="softmax" if softmax else "sigmoid",
                   correction_bias=x.corr, renormalize=renormalize, routed_scaling_factor=scale,
                   num_token_non_padded=nt, skip_at=skip_at)  # fmt: skip
    dev = {
        "ids": x.ids.clone().to(DEVICE),
        "w": x.weights.clone().to(DEVICE),
        "logits": x.logits.to(DEVICE),
        "corr": None if x.corr is None else x.corr.to(DEVICE),
        "nt": None if nt is None else nt.to(DEVICE),
    }
    TK.oea_reroute_triton_(dev["ids"], dev["w"], dev["logits"], k0=k0, k=k, softmax=softmax,
                           correction_bias=dev["corr"], renormalize=renormalize, routed_scaling_factor=scale,
                           num_token_non_padded=dev["nt"], skip_at=skip_at)  # fmt: skip
    return ref_ids, ref_w, dev["ids"].cpu(), dev["w"].cpu()


def plain_top_k_(x: SimpleNamespace, *, k: int, softmax: bool) -> None:
    """Plain routing as the reference ranks: softmax or sigmoid scores (+ correction bias), stable sort."""
    x32 = x.logits.float()
    rank = torch.softmax(x32, dim=-1) if softmax else torch.sigmoid(x32)
    if x.corr is not None:
        rank = rank + x.corr.float()
    order = torch.sort(rank, dim=1, descending=True, stable=True).indices[:, :k]
    routed = (x.ids[:, :k] >= 0).any(dim=1, keepdim=True)
    x.ids[:, :k] = torch.where(routed, order.to(x.ids.dtype), x.ids[:, :k])


def assert_same(ref_ids: Any, ref_w: Any, ids: Any, w: Any, *, atol: float = 1e-5) -> None:
    assert torch.equal(ids.to(torch.int32), ref_ids), (ids != ref_ids).nonzero()[:5]
    torch.testing.assert_close(w.float(), ref_w, atol=atol, rtol=1e-3)


SHAPES = [  # m, n, k, k0, softmax, bias, scale, ntnp, shared, minus_one_rows
    pytest.param(1, 128, 8, 3, True, False, None, None, 0, (), id="qwen3-batch1"),
    pytest.param(16, 128, 8, 3, True, False, None, None, 0, (3,), id="qwen3-batch16"),
    pytest.param(37, 128, 8, 3, True, False, None, 35, 0, (0, 20), id="qwen3-odd-batch-padded"),
    pytest.param(24, 256, 8, 4, False, True, 2.5, 21, 1, (5,), id="glm5-sigmoid-bias-shared"),
    pytest.param(5, 16, 4, 2, True, False, None, None, 0, (), id="tiny"),
    pytest.param(3, 40, 6, 6, False, True, None, None, 0, (), id="k0-equals-k-odd-n"),
    pytest.param(300, 32, 4, 4, True, False, None, 290, 0, (7, 150), id="many-rows-several-programs"),
]


@pytest.mark.parametrize(("m", "n", "k", "k0", "softmax", "bias", "scale", "ntnp", "shared", "minus"), SHAPES)
def test_matches_torch_reference(
    path: str, m: int, n: int, k: int, k0: int, softmax: bool, bias: bool, scale: float | None,
    ntnp: int | None, shared: int, minus: tuple[int, ...],
) -> None:  # fmt: skip
    x = make(m, n, k, seed=m * 1000 + n, bias=bias, shared=shared, minus_one_rows=minus)
    shared_before = x.ids[:, k:].clone(), x.weights[:, k:].clone()
    ref_ids, ref_w, ids, w = run_both(x, k=k, k0=k0, softmax=softmax, scale=scale, ntnp=ntnp)
    assert_same(ref_ids, ref_w, ids, w)
    assert torch.equal(ids[:, k:].to(torch.int32), shared_before[0])  # fused shared columns untouched
    assert torch.equal(w[:, k:], shared_before[1])
    invalid = [r for r in range(m) if r in minus or (ntnp is not None and r >= ntnp)]
    assert (ids[invalid, :k] == -1).all() and (w[invalid, :k] == 0).all()


def test_ties_go_to_the_lower_index_like_the_numpy_spec(path: str) -> None:
    m, n, k, k0 = 12, 64, 8, 3
    x = make(m, n, k, seed=7, ties=True)
    ref_ids, ref_w, ids, w = run_both(x, k=k, k0=k0, softmax=True)
    assert_same(ref_ids, ref_w, ids, w)
    scores = torch.softmax(x.logits.float(), dim=-1).double().numpy()
    spec_ids, spec_w = reference(scores, scores, k, k0, np.ones(m, dtype=bool))
    assert np.array_equal(ids.numpy().astype(np.int64), spec_ids)
    assert np.allclose(w.numpy(), spec_w, atol=1e-5)


def test_small_active_set_fills_with_top1_weight_zero(path: str) -> None:
    m, n, k, k0 = 9, 32, 8, 2
    x = make(m, n, k, seed=3)
    x.logits = x.logits[:1].expand(m, n).contiguous()  # every row the same: |S| = k0 < k
    ref_ids, ref_w, ids, w = run_both(x, k=k, k0=k0, softmax=True)
    assert_same(ref_ids, ref_w, ids, w)
    assert (w[:, k0:] == 0).all() and (ids[:, k0:] == ids[:, :1]).all()


def test_experts_only_late_rows_pick_join_the_union(path: str) -> None:
    """Rows past the first program's rows and past the first single-path tile still count."""
    m, n, k, k0 = 300, 32, 4, 4
    x = make(m, n, k, seed=13)
    x.logits[:, n - 1] = -10.0
    x.logits[296:, n - 1] = 10.0  # only the last rows want expert n-1, as their top-1
    ref_ids, ref_w, ids, w = run_both(x, k=k, k0=k0, softmax=True)
    assert_same(ref_ids, ref_w, ids, w)
    assert (ids[296:, 0] == n - 1).all()


def test_transformers_layout_int64_ids_bf16_weights(path: str) -> None:
    m, n, k, k0 = 16, 128, 8, 3
    x = make(m, n, k, seed=11, ids_dtype=torch.int64, w_dtype=torch.bfloat16)
    ref_ids, ref_w, ids, w = run_both(x, k=k, k0=k0, softmax=True)
    assert ids.dtype == torch.int64 and w.dtype == torch.bfloat16
    assert_same(ref_ids, ref_w, ids, w, atol=1e-2)


def test_renormalize_off_and_strided_logits(path: str) -> None:
    m, n, k, k0 = 10, 64, 8, 3
    x = make(m, n, k, seed=5)
    wide = torch.zeros(m, n + 16, dtype=torch.bfloat16)
    wide[:, :n] = x.logits
    x.logits = wide[:, :n]  # row stride n + 16
    ref_ids, ref_w, ids, w = run_both(x, k=k, k0=k0, softmax=True, renormalize=False)
    assert_same(ref_ids, ref_w, ids, w)


def test_fresh_random_batches(path: str) -> None:
    for seed in range(4):
        m = [1, 2, 33, 64][seed]
        x = make(m, 128, 8, seed=100 + seed, minus_one_rows=(m - 1,) if m > 1 else ())
        assert_same(*run_both(x, k=8, k0=3, softmax=True))


def test_empty_batch_and_path_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    x = make(0, 32, 4, seed=0)
    TK.oea_reroute_triton_(x.ids, x.weights, x.logits, k0=2, k=4, softmax=True, correction_bias=None,
                           renormalize=True, routed_scaling_factor=None, num_token_non_padded=None)  # fmt: skip
    monkeypatch.setenv(TK.PATH_KNOB, "auto")
    monkeypatch.setenv(TK.SINGLE_MAX_KNOB, "8")
    assert (TK.choose_path(8), TK.choose_path(9)) == ("single", "split")
    monkeypatch.delenv(TK.SINGLE_MAX_KNOB)
    assert [TK.choose_path(m, 256) for m in (1, 2, 3)] == ["single", "single", "split"]  # 512 logits
    assert [TK.choose_path(m, 128) for m in (4, 5)] == ["single", "split"]
    monkeypatch.setenv(TK.PATH_KNOB, "fast")
    with pytest.raises(ValueError, match="expected auto, single, repl, split, split-light or split-old"):
        TK.choose_path(1)


@pytest.mark.skipif(DEVICE != "cuda", reason="compiled kernels on a real grid need a CUDA GPU")
@pytest.mark.parametrize(("n", "k", "k0", "softmax", "bias"), [(128, 8, 3, True, False), (256, 8, 4, False, True)])
def test_auto_path_on_the_gpu(n: int, k: int, k0: int, softmax: bool, bias: bool) -> None:
    """The default path from 1 row to past one program per SM (132 on an H200), exact against the reference,
    then replayed from a CUDA graph on new data (the scratch buffer of the split path comes from the graph)."""
    for m in (1, 4, 5, 8, 64, 131, 132, 133, 257, 1024, 3001):
        x = make(m, n, k, seed=m, bias=bias, minus_one_rows=(m // 2,) if m > 1 else ())
        assert_same(*run_both(x, k=k, k0=k0, softmax=softmax, ntnp=m - 1 if m > 1 else None))
    m = 256
    x = make(m, n, k, seed=9, bias=bias)
    logits, ids, w = x.logits.cuda(), x.ids.cuda(), x.weights.cuda()
    corr = None if x.corr is None else x.corr.cuda()
    kw = {"k0": k0, "k": k, "softmax": softmax, "correction_bias": corr, "renormalize": True,
          "routed_scaling_factor": None, "num_token_non_padded": None}  # fmt: skip
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        TK.oea_reroute_triton_(ids, w, logits, **kw)
    for seed in (1, 2, 3):
        fresh = make(m, n, k, seed=seed, bias=bias)
        fresh.corr = x.corr
        logits.copy_(fresh.logits.cuda())
        ids.copy_(fresh.ids.cuda())
        w.copy_(fresh.weights.cuda())
        graph.replay()
        ref_ids, ref_w = fresh.ids.clone(), fresh.weights.clone()
        reroute_torch_(ref_ids, ref_w, fresh.logits, k0=k0, k=k, scoring_func="softmax" if softmax else "sigmoid",
                       correction_bias=fresh.corr, renormalize=True, routed_scaling_factor=None,
                       num_token_non_padded=None)  # fmt: skip
        assert_same(ref_ids, ref_w, ids.cpu(), w.cpu())


def union_case(m: int, n: int, k: int, k0: int, union: int, seed: int) -> SimpleNamespace:
    """Softmax inputs whose rows' top-k0 cover exactly ``union`` experts (row i prefers experts
    ``i*k0 .. i*k0 + k0-1`` modulo ``union``), with the plain top-k routing a router would hand the hook."""
    x = make(m, n, k, seed=seed)
    prefer = (torch.arange(m)[:, None] * k0 + torch.arange(k0)[None, :]) % union
    logits = x.logits.float() * 0.5  # |x| well below 10 (few ties: bf16 of standard normals)
    logits.scatter_(1, prefer, 10.0 + torch.arange(k0, dtype=torch.float32).expand(m, k0))
    x.logits = logits.to(torch.bfloat16)
    scores = torch.softmax(x.logits.float(), dim=-1)
    top = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    w = scores.gather(1, top)
    x.ids[:, :k] = top.to(torch.int32)
    x.weights[:, :k] = w / w.sum(dim=1, keepdim=True)
    return x


@pytest.mark.parametrize("union", [29, 30, 32])
def test_skip_threshold_keeps_plain_routing_bit_for_bit(path: str, union: int) -> None:
    """skip_at = 30 of 32 experts: a union of 29 is rerouted (OEA exactly, as the reference without a skip);
    30 (the threshold) and 32 leave the plain top-k ids and weights exactly as they came."""
    m, n, k, k0 = 24, 32, 4, 2
    x = union_case(m, n, k, k0, union, seed=union)
    ref_ids, ref_w, ids, w = run_both(x, k=k, k0=k0, softmax=True, skip_at=30)
    assert_same(ref_ids, ref_w, ids, w)
    if union >= 30:
        assert torch.equal(ids, x.ids) and torch.equal(w, x.weights)
    else:
        oea_ids, oea_w, _, _ = run_both(x, k=k, k0=k0, softmax=True, skip_at=None)
        assert_same(oea_ids, oea_w, ids, w)
        assert not torch.equal(ids, x.ids)
        assert torch.unique(ids[:, :k]).numel() == union


class LaunchRecorder:
    """Wraps a @triton.jit kernel: records each launch's grid and every argument that is not a tensor."""

    def __init__(self, kernel: Any, log: list[Any]) -> None:
        self.kernel, self.log = kernel, log

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            plain = [a for a in args if not isinstance(a, torch.Tensor)]
            options = {key: v for key, v in kwargs.items() if not isinstance(v, torch.Tensor)}
            self.log.append((self.kernel.__name__, grid, plain, options))
            return self.kernel[grid](*args, **kwargs)

        return launch


def test_the_host_launches_the_same_whatever_the_data_decides(path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The skip is decided inside the kernels: a skipped and a rerouted batch of one shape get the same
    launches, grids and scalar arguments from the host (so one captured graph serves both)."""
    logs: dict[int, list[Any]] = {}
    for union in (29, 32):
        logs[union] = []
        for name in KERNELS:
            monkeypatch.setattr(TK, name, LaunchRecorder(getattr(TK, name).kernel
                                                         if isinstance(getattr(TK, name), LaunchRecorder)
                                                         else getattr(TK, name), logs[union]))  # fmt: skip
        x = union_case(24, 32, 4, 2, union, seed=5)
        _, _, ids, _ = run_both(x, k=4, k0=2, softmax=True, skip_at=30)
        assert torch.equal(ids, x.ids) == (union >= 30)
    assert logs[29] == logs[32] and logs[29]


@pytest.mark.parametrize("path", ["split", "split-light"])
def test_a_router_breaking_the_kth_tie_otherwise_still_gets_the_reference(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Incoming ids that are NOT the plain top-k under the reference's key (the k-th slot swapped for an
    expert just outside it, as a router breaking a tie the other way would): the repair selection notices
    (its per-row check) and falls back to the full selection, so the result is still the reference's."""
    monkeypatch.setenv(TK.PATH_KNOB, path)
    m, n, k, k0 = 24, 32, 4, 2
    x = union_case(m, n, k, k0, 12, seed=3)
    plain_top_k_(x, k=k, softmax=True)
    scores = torch.softmax(x.logits.float(), dim=-1)
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices
    x.ids[::3, k - 1] = order[::3, k].to(x.ids.dtype)  # every third row: its (k+1)-th expert in the k-th slot
    nt = None
    ref_ids, ref_w = x.ids.clone(), x.weights.clone()
    reroute_torch_(ref_ids, ref_w, x.logits, k0=k0, k=k, scoring_func="softmax", correction_bias=None,
                   renormalize=True, routed_scaling_factor=None, num_token_non_padded=nt)  # fmt: skip
    ids, w = x.ids.clone().to(DEVICE), x.weights.clone().to(DEVICE)
    TK.oea_reroute_triton_(ids, w, x.logits.to(DEVICE), k0=k0, k=k, softmax=True, correction_bias=None,
                           renormalize=True, routed_scaling_factor=None, num_token_non_padded=None)  # fmt: skip
    assert_same(ref_ids, ref_w, ids.cpu(), w.cpu())
