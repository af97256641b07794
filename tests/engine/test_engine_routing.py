"""Routing: plain top-k and OEA (kit/engine/routing.py), and the shared test vectors."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from kit.engine.routing import oea_route, topk_route, unique_experts

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "tests" / "data" / "oea_vectors.json"
GENERATOR = Path(__file__).with_name("make_oea_vectors.py")


def f32(rows: list[list[float]]) -> np.ndarray:
    return np.array(rows, dtype=np.float32)


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kit_make_oea_vectors", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------------ hand-worked


def test_topk_hand_worked() -> None:
    ids, w = topk_route(f32([[0.1, 0.4, 0.2, 0.3]]), 2)
    assert ids.tolist() == [[1, 3]]
    np.testing.assert_allclose(w, [[0.4 / 0.7, 0.3 / 0.7]], atol=1e-6)
    assert ids.dtype == np.int64 and w.dtype == np.float32


def test_topk_ties_go_to_lower_index() -> None:
    ids, _ = topk_route(f32([[0.2, 0.3, 0.3, 0.2]]), 3)
    assert ids.tolist() == [[1, 2, 0]]


def test_oea_hand_b2_e6_k3_k01() -> None:
    # top-1: row0 -> 0, row1 -> 2, so S = {0, 2}; |S| = 2 < k = 3, so one weight-0 filler (the top-1).
    # row0 ranks 0,1,2,...: in S: 0 (.30), 2 (.20) -> weights .6, .4
    # row1 ranks 2,4,3,1,5,0: in S: 2 (.40), 0 (.05) -> weights 8/9, 1/9
    scores = f32([[0.30, 0.25, 0.20, 0.15, 0.06, 0.04],
                  [0.05, 0.12, 0.40, 0.15, 0.20, 0.08]])
    ids, w = oea_route(scores, k=3, k0=1)
    assert ids.tolist() == [[0, 2, 0], [2, 0, 2]]
    np.testing.assert_allclose(w, [[0.6, 0.4, 0.0], [8 / 9, 1 / 9, 0.0]], atol=1e-6)
    assert unique_experts(ids, w) == 2


def test_oea_hand_b3_overlap() -> None:
    # top-1: 0, 1, 3 -> S = {0, 1, 3}. Each row takes its best 2 within S:
    # row0: 0 (.50), 1 (.20); row1: 1 (.35), 0 (.30); row2: 3 (.45), then 1 (.10) beats 0 (.05).
    # Plain top-2 would use {0, 1, 2, 3} (row2 takes 2 at .15): OEA activates 3 instead of 4.
    scores = f32([[0.50, 0.20, 0.10, 0.08, 0.07, 0.05],
                  [0.30, 0.35, 0.15, 0.10, 0.06, 0.04],
                  [0.05, 0.10, 0.15, 0.45, 0.13, 0.12]])
    ids, w = oea_route(scores, k=2, k0=1)
    assert ids.tolist() == [[0, 1], [1, 0], [3, 1]]
    np.testing.assert_allclose(w, [[5 / 7, 2 / 7], [7 / 13, 6 / 13], [9 / 11, 2 / 11]], atol=1e-6)
    assert unique_experts(ids, w) == 3
    base_ids, base_w = topk_route(scores, 2)
    assert base_ids.tolist() == [[0, 1], [1, 0], [3, 2]]
    assert unique_experts(base_ids, base_w) == 4


def test_oea_hand_padded_rows() -> None:
    # row1 is padding: its favourite expert 0 must not enter S = {1, 2}.
    scores = f32([[0.10, 0.40, 0.20, 0.25, 0.05],
                  [0.90, 0.01, 0.03, 0.04, 0.02],
                  [0.30, 0.10, 0.35, 0.05, 0.20]])
    ids, w = oea_route(scores, k=2, k0=1, valid=np.array([True, False, True]))
    assert ids.tolist() == [[1, 2], [-1, -1], [2, 1]]
    np.testing.assert_allclose(w, [[2 / 3, 1 / 3], [0, 0], [7 / 9, 2 / 9]], atol=1e-6)
    assert unique_experts(ids, w) == 2


def test_oea_hand_piggyback_k02() -> None:
    # top-2: row0 {0, 1}, row1 {7, 6} -> S = {0, 1, 6, 7}; each row tops up to k = 4 from S.
    scores = f32([[0.30, 0.20, 0.15, 0.12, 0.10, 0.06, 0.04, 0.03],
                  [0.02, 0.04, 0.06, 0.10, 0.12, 0.15, 0.20, 0.31]])
    ids, w = oea_route(scores, k=4, k0=2)
    assert ids.tolist() == [[0, 1, 6, 7], [7, 6, 1, 0]]
    np.testing.assert_allclose(w[0], np.array([30, 20, 4, 3]) / 57, atol=1e-6)
    np.testing.assert_allclose(w[1], np.array([31, 20, 4, 2]) / 57, atol=1e-6)


def test_oea_all_rows_padded() -> None:
    ids, w = oea_route(f32([[0.4, 0.3, 0.2, 0.1]]), k=2, k0=1, valid=np.array([False]))
    assert ids.tolist() == [[-1, -1]] and w.tolist() == [[0.0, 0.0]]
    assert unique_experts(ids, w) == 0


def test_oea_with_k0_equal_k_is_topk() -> None:
    scores = np.random.default_rng(0).random((32, 16)).astype(np.float32)
    ids, w = oea_route(scores, k=4, k0=4)
    base_ids, base_w = topk_route(scores, 4)
    assert np.array_equal(ids, base_ids)
    np.testing.assert_array_equal(w, base_w)


@pytest.mark.parametrize(("k", "k0"), [(0, 0), (3, 4), (3, 0), (7, 1)])
def test_bad_arguments(k: int, k0: int) -> None:
    with pytest.raises(ValueError):
        oea_route(f32([[0.1] * 6]), k=k, k0=k0)


def test_unique_experts_ignores_zero_weights_and_padding() -> None:
    ids = np.array([[3, 5, 3], [-1, -1, -1], [5, 7, 7]])
    w = np.array([[0.5, 0.5, 0.0], [0, 0, 0], [0.9, 0.1, 0.0]], dtype=np.float32)
    assert unique_experts(ids, w) == 3


# ----------------------------------------------------------------------------------------- batch 1


@pytest.mark.parametrize("seed", range(5))
def test_batch_one_equals_topk0(seed: int) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.random((1, 64)).astype(np.float32)
    ids, w = oea_route(scores, k=8, k0=4)
    ref_ids, ref_w = topk_route(scores, 4)
    assert np.array_equal(ids[:, :4], ref_ids)
    np.testing.assert_array_equal(w[:, :4], ref_w)
    assert np.all(ids[:, 4:] == ref_ids[:, :1]) and np.all(w[:, 4:] == 0)
    assert unique_experts(ids, w) == 4


# ---------------------------------------------------------------------------------------- property


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (z / z.sum(axis=1, keepdims=True)).astype(np.float32)


def test_random_properties() -> None:
    rng = np.random.default_rng(1234)
    for _ in range(300):
        batch = int(rng.integers(1, 40))
        experts = int(rng.choice([4, 8, 16, 64, 128]))
        k = int(rng.integers(1, min(experts, 9) + 1))
        k0 = int(rng.integers(1, k + 1))
        bias = rng.normal(0, float(rng.choice([0.0, 1.0, 2.0])), size=experts)
        scores = _softmax(rng.normal(size=(batch, experts)) + bias)
        if rng.random() < 0.2:  # a few exact ties
            scores[:, : experts // 2] = np.round(scores[:, : experts // 2], 2)
        valid = rng.random(batch) < 0.8 if rng.random() < 0.5 else np.ones(batch, dtype=bool)
        _check_invariants(scores, k, k0, valid)


def _check_invariants(scores: np.ndarray, k: int, k0: int, valid: np.ndarray) -> None:
    ids, w = oea_route(scores, k, k0, valid)
    base_ids, base_w = topk_route(scores, k)
    assert ids.shape == w.shape == (scores.shape[0], k)
    assert np.all(ids[~valid] == -1) and np.all(w[~valid] == 0)
    if not valid.any():
        return
    first, _ = topk_route(scores[valid], k0)
    union = set(first.ravel().tolist())
    n_chosen = min(k, len(union))
    used = set(ids[w > 0].tolist())
    # never outside the union of the top-k0 sets, and never more experts than plain top-k
    assert used <= union
    assert unique_experts(ids, w) == len(union)
    assert unique_experts(ids, w) <= unique_experts(base_ids[valid], base_w[valid])
    for row in np.flatnonzero(valid):
        chosen = ids[row, :n_chosen]
        # every row keeps its own top-k0 experts, in order, first
        assert chosen[:k0].tolist() == first[np.flatnonzero(valid).tolist().index(row)].tolist()
        # the rest are its best experts among the union, best first (ties: lower index first)
        in_union = [e for e in np.argsort(-scores[row], kind="stable").tolist() if e in union]
        assert chosen.tolist() == in_union[:n_chosen]
        assert np.isclose(w[row].sum(), 1.0, atol=1e-5)
        assert np.all(w[row, n_chosen:] == 0) and np.all(ids[row, n_chosen:] == ids[row, 0])
        np.testing.assert_allclose(w[row, :n_chosen], scores[row, chosen] / scores[row, chosen].sum(),
                                   rtol=1e-5)


# ----------------------------------------------------------------------------------------- vectors


def _vectors() -> dict[str, Any]:
    with VECTORS.open() as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def test_vectors_file_is_documented_and_small() -> None:
    assert VECTORS.stat().st_size < 3_000_000
    data = _vectors()
    assert next(iter(data)) == "format" and "expected_ids" in data["format"]
    names = [c["name"] for c in data["cases"]]
    assert len(names) == len(set(names))
    assert {c["batch"] for c in data["cases"]} >= {1, 16, 1024}
    assert any(not all(c["valid"]) for c in data["cases"])


def test_vectors_match_the_function() -> None:
    for case in _vectors()["cases"]:
        scores = np.array(case["scores"], dtype=np.float32)
        # rows have no ties among valid entries, so every implementation ranks them the same way
        for row, ok in zip(scores, case["valid"], strict=True):
            assert not ok or np.unique(row).size == row.size
        ids, w = oea_route(scores, case["k"], case["k0"], np.array(case["valid"]))
        assert ids.tolist() == case["expected_ids"], case["name"]
        np.testing.assert_array_equal(w, np.array(case["expected_weights"], dtype=np.float32))
        assert unique_experts(ids, w) == case["expected_active_experts"]
        _check_invariants(scores, case["k"], case["k0"], np.array(case["valid"]))


def test_regenerating_gives_the_same_file() -> None:
    gen = load_generator()
    assert gen.render(gen.build_cases()) == VECTORS.read_text(), "run tests/engine/make_oea_vectors.py"
