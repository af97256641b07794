"""Write tests/data/oea_vectors.json: shared test vectors for OEA routing implementations.

Run ``python tests/engine/make_oea_vectors.py`` from the repository root (``--check`` only compares).
The output is deterministic across Python and numpy versions: scores come from ``random.Random(seed)
.random()`` (the one stream Python promises to keep), are normalised with ``math.fsum``, rounded to 6
significant digits and then to float32; the expected ids and weights come from
``kit.engine.routing.oea_route``, which sums in float64 so the summation order does not matter.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kit.engine.routing import oea_route, unique_experts  # noqa: E402

OUT = ROOT / "tests" / "data" / "oea_vectors.json"

FORMAT = (
    "OEA routing test vectors (Opportunistic Expert Activation, arXiv 2511.02237, simplified). "
    "Top-level keys: format, generator, cases. Each case: name; batch B; num_experts E; k; k0; "
    "valid: B booleans (false = padded row); scores: B rows of E router probabilities, every number "
    "exactly representable in float32 (parse the JSON number as a double, then convert to float32; "
    "no row has ties among its valid entries); expected_ids: B rows of k int expert ids; "
    "expected_weights: B rows of k float32 weights; expected_active_experts: the size of the union S. "
    "Rule: every valid row keeps its top-k0 experts; S = union of those sets over valid rows; every "
    "valid row then takes its top-k experts among S, best first; weights = its scores renormalised "
    "over its chosen experts. If |S| < k the remaining slots hold the row's top-1 id with weight 0. "
    "Padded rows: ids -1, weights 0, and they do not contribute to S. Ties: lower expert index first. "
    "Compare ids exactly and weights with abs tolerance 1e-6 (the reference sums in float64)."
)

HAND_CASES: list[dict[str, Any]] = [
    {"name": "hand_b2_e6_k3_k01", "k": 3, "k0": 1, "valid": None, "scores": [
        [0.30, 0.25, 0.20, 0.15, 0.06, 0.04],
        [0.05, 0.12, 0.40, 0.15, 0.20, 0.08]]},
    {"name": "hand_b3_e6_k2_k01_overlap", "k": 2, "k0": 1, "valid": None, "scores": [
        [0.50, 0.20, 0.10, 0.08, 0.07, 0.05],
        [0.30, 0.35, 0.15, 0.10, 0.06, 0.04],
        [0.05, 0.10, 0.15, 0.45, 0.13, 0.12]]},
    {"name": "hand_padded_b3_e5_k2_k01", "k": 2, "k0": 1, "valid": [True, False, True], "scores": [
        [0.10, 0.40, 0.20, 0.25, 0.05],
        [0.90, 0.01, 0.03, 0.04, 0.02],
        [0.30, 0.10, 0.35, 0.05, 0.20]]},
    {"name": "hand_b1_e6_k3_k02", "k": 3, "k0": 2, "valid": None, "scores": [
        [0.10, 0.30, 0.05, 0.25, 0.20, 0.09]]},
    {"name": "hand_b2_e8_k4_k02_piggyback", "k": 4, "k0": 2, "valid": None, "scores": [
        [0.30, 0.20, 0.15, 0.12, 0.10, 0.06, 0.04, 0.03],
        [0.02, 0.04, 0.06, 0.10, 0.12, 0.15, 0.20, 0.31]]},
    {"name": "hand_all_padded_b2_e4_k2_k01", "k": 2, "k0": 1, "valid": [False, False], "scores": [
        [0.40, 0.30, 0.20, 0.10],
        [0.10, 0.20, 0.30, 0.40]]},
]

# name, seed, batch, experts, k, k0, number of padded rows, popularity skew (max exponent of 2)
RANDOM_CASES: list[tuple[str, int, int, int, int, int, int, int]] = [
    ("random_b1_e64_k8_k04", 1, 1, 64, 8, 4, 0, 3),
    ("random_b1_e256_k8_k03", 2, 1, 256, 8, 3, 0, 3),
    ("random_b16_e64_k8_k03", 3, 16, 64, 8, 3, 0, 3),
    ("random_b16_e64_k8_k04", 4, 16, 64, 8, 4, 0, 3),
    ("random_b16_e256_k8_k04", 5, 16, 256, 8, 4, 0, 3),
    ("padded_b16_e64_k8_k04", 6, 16, 64, 8, 4, 5, 3),
    ("random_b64_e256_k8_k03", 7, 64, 256, 8, 3, 0, 5),
    ("random_b1024_e64_k8_k03", 8, 1024, 64, 8, 3, 0, 6),
    ("padded_b1024_e64_k8_k04", 9, 1024, 64, 8, 4, 100, 6),
]


def f32_text(value: float) -> str:
    """Shortest decimal that reads back (via a double) as the same float32."""
    x = np.float32(value)
    text = np.format_float_positional(x, unique=True, trim="0")
    if np.float32(float(text)) != x:  # pragma: no cover - double rounding; never seen, but be exact
        text = repr(float(x))
    return text


def random_scores(rng: random.Random, batch: int, experts: int, skew: int) -> np.ndarray:
    """Rows of tie-free float32 probabilities with a fixed per-expert popularity (powers of two)."""
    popularity = [2 ** int(rng.random() * (skew + 1)) for _ in range(experts)]
    rows: list[list[float]] = []
    while len(rows) < batch:
        raw = [(1 + int(rng.random() * 999_999)) * pop for pop in popularity]
        total = math.fsum(raw)
        row = [float(f"{v / total:.6g}") for v in raw]
        if len({np.float32(v) for v in row}) == experts:  # no ties in float32
            rows.append(row)
    return np.array(rows, dtype=np.float32)


def padded_rows(rng: random.Random, batch: int, padded: int) -> np.ndarray:
    """A validity mask with ``padded`` False entries at random places."""
    keys = [rng.random() for _ in range(batch)]
    valid = np.ones(batch, dtype=bool)
    valid[sorted(range(batch), key=keys.__getitem__)[:padded]] = False
    return valid


def build_cases() -> list[dict[str, Any]]:
    """Every case with its expected output."""
    cases: list[dict[str, Any]] = []
    for hand in HAND_CASES:
        scores = np.array(hand["scores"], dtype=np.float32)
        valid = hand["valid"] if hand["valid"] is not None else [True] * scores.shape[0]
        cases.append(_case(hand["name"], scores, hand["k"], hand["k0"], np.array(valid, dtype=bool)))
    for name, seed, batch, experts, k, k0, padded, skew in RANDOM_CASES:
        rng = random.Random(seed)
        scores = random_scores(rng, batch, experts, skew)
        valid = padded_rows(rng, batch, padded)
        cases.append(_case(name, scores, k, k0, valid))
    return cases


def _case(name: str, scores: np.ndarray, k: int, k0: int, valid: np.ndarray) -> dict[str, Any]:
    ids, weights = oea_route(scores, k, k0, valid)
    active = unique_experts(ids, weights) if valid.any() else 0
    return {"name": name, "batch": int(scores.shape[0]), "num_experts": int(scores.shape[1]), "k": k,
            "k0": k0, "valid": valid.tolist(), "scores": scores, "expected_ids": ids,
            "expected_weights": weights, "expected_active_experts": active}


def _matrix(rows: np.ndarray, floats: bool) -> str:
    cell = f32_text if floats else (lambda v: str(int(v)))
    lines = ["[" + ",".join(cell(v) for v in row) + "]" for row in rows.tolist()]
    return "[\n        " + ",\n        ".join(lines) + "\n      ]"


def render(cases: list[dict[str, Any]]) -> str:
    """The JSON text: one matrix row per line, so diffs stay readable."""
    parts = []
    for case in cases:
        fields = []
        for key, value in case.items():
            if key in ("scores", "expected_weights"):
                text = _matrix(value, floats=True)
            elif key == "expected_ids":
                text = _matrix(value, floats=False)
            else:
                text = json.dumps(value)
            fields.append(f'      "{key}": {text}')
        parts.append("    {\n" + ",\n".join(fields) + "\n    }")
    head = (f'{{\n  "format": {json.dumps(FORMAT)},\n'
            f'  "generator": "tests/engine/make_oea_vectors.py",\n  "cases": [\n')
    return head + ",\n".join(parts) + "\n  ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare with the file instead of writing it")
    args = parser.parse_args(argv)
    text = render(build_cases())
    if args.check:
        same = OUT.exists() and OUT.read_text() == text
        print("up to date" if same else f"{OUT} is stale: run {Path(__file__).name}")
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text) / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
