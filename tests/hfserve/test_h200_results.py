"""The H200 results kept in benchmarks/results, checked without kit's statistics.

These bundles were measured on a real GPU (transformers serve, docs/transformers.md). Each test reads the raw
per-request records straight out of the signed archive with ``tarfile``, recomputes every cell's TPOT mean and
the primary comparison with scipy's Welch test (``ttest_ind(equal_var=False)`` on the log cell means, its own
confidence interval), and checks what kit's ``summary.json`` says against that; then it checks the claim the
docs make: wherever the decode step measured without kit (``moe_decode_step.py``, the ``known`` results beside
the bundle) moves by 10 % or more, kit's primary verdict is significant and of the same sign.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tarfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

sps = pytest.importorskip("scipy.stats")

ROOT = Path(__file__).resolve().parents[2]
SIGNS = ROOT / "benchmarks/results/h200-signs-2026-12-02"
POWERED = ROOT / "benchmarks/results/h200-powered-2026-12-01"
ARCHIVES = [
    (SIGNS / "transformers-h200-signs.tar.gz", SIGNS / "runner.allowed_signers"),
    (SIGNS / "transformers-h200-eager.tar.gz", SIGNS / "runner.allowed_signers"),
    (POWERED / "bundle.tar.gz", POWERED / "runner.allowed_signers"),
]


def _read(archive: Path) -> tuple[dict[str, list[float]], dict[str, object]]:
    """Per (arm, level): each cell's TPOT mean in ms, from records.jsonl; and the bundle's summary.json."""
    cells: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    summary: dict[str, object] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            parts = member.name.split("/")
            if parts[-1] == "summary.json" and len(parts) == 2:
                summary = json.load(tar.extractfile(member))  # type: ignore[arg-type]
            if parts[-1] != "records.jsonl" or len(parts) != 5 or parts[1] != "cells":
                continue  # not an included cell's records (an interrupted attempt is kept under failed/)
            cell, level = parts[-3], int(parts[-2].removeprefix("level-"))
            for line in tar.extractfile(member):  # type: ignore[union-attr]
                rec = json.loads(line)
                if rec["status"] != 200 or rec["error"]:
                    continue
                tokens = rec["usage_completion_tokens"]
                cells[(cell.rsplit("-r", 1)[0], level, cell)].append(
                    (rec["e2e_ns"] - rec["ttft_ns"]) / (tokens - 1) / 1e6)
    means: dict[str, list[float]] = defaultdict(list)
    for (arm, level, _), tpots in sorted(cells.items()):
        means[f"{arm}@{level}"].append(float(np.mean(tpots)))
    return means, summary


def _primary(summary: dict[str, object]) -> list[dict[str, object]]:
    return [c for c in summary["comparisons"] if c["role"] == "primary"]  # type: ignore[index, union-attr]


@pytest.mark.slow  # ~3.5 s each: kit verify re-hashes and recomputes the whole bundle
@pytest.mark.parametrize("archive,trust", ARCHIVES, ids=lambda p: p.name if isinstance(p, Path) else "")
def test_kit_verify_passes_on_the_kept_archive(archive: Path, trust: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "kit", "verify", "--trust", str(ROOT / "allowed_signers"),
                        "--trust", str(trust), str(archive)], check=False, capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    # written under summary schema 2 (before short responses were counted): recomputed as that schema, to the byte
    assert "TRUSTED" in r.stdout
    assert "summary.json recomputed from the records OK (summary schema 2, as the kit that wrote it" in r.stdout


@pytest.mark.parametrize("archive", [a for a, _ in ARCHIVES], ids=lambda p: p.name)
def test_this_kit_recomputes_the_same_primary_numbers(archive: Path, tmp_path: Path) -> None:
    from kit.stats import summarize_bundle

    with tarfile.open(archive, "r:gz") as tar:
        tar.extractall(tmp_path, filter="data")
    (root,) = tmp_path.iterdir()
    _, stored = _read(archive)
    fresh = summarize_bundle(root, legacy=True)  # the analysis of its schema (Welch); the blocked default differs
    keys = ("arm", "level", "ratio", "ratio_ci", "p_value", "df", "significant", "status", "interval_confidence")
    assert [{k: c[k] for k in keys} for c in _primary(fresh)] == [{k: c[k] for k in keys} for c in _primary(stored)]
    assert all(c["lengths"]["arm_short"] == c["lengths"]["baseline_short"] == 0 for c in _primary(fresh))


@pytest.mark.parametrize("archive", [a for a, _ in ARCHIVES], ids=lambda p: p.name)
def test_primary_comparisons_match_scipy_welch_on_the_raw_records(archive: Path) -> None:
    means, summary = _read(archive)
    primary = _primary(summary)
    assert primary
    for c in primary:
        arm = np.log(means[f"{c['arm']}@{c['level']}"])
        base = np.log(means[f"{c['baseline']}@{c['level']}"])
        assert (arm.size, base.size) == (c["cells"]["arm"], c["cells"]["baseline"])  # type: ignore[index]
        res = sps.ttest_ind(arm, base, equal_var=False)
        assert c["p_value"] == pytest.approx(res.pvalue, rel=1e-4)
        assert c["ratio"] == pytest.approx(math.exp(arm.mean() - base.mean()), rel=1e-5)
        lo, hi = res.confidence_interval(confidence_level=c["interval_confidence"])
        assert c["ratio_ci"] == pytest.approx([math.exp(lo), math.exp(hi)], rel=1e-5)
        # significance: Holm over the primary family, from scipy's p-values alone
        ps = sorted(float(sps.ttest_ind(np.log(means[f"{d['arm']}@{d['level']}"]),
                                        np.log(means[f"{d['baseline']}@{d['level']}"]), equal_var=False).pvalue)
                    for d in primary)
        m, holm = len(ps), []
        for j, p in enumerate(ps):
            if p > 0.05 / (m - j):
                break
            holm.append(p)
        assert c["significant"] == (res.pvalue in holm)


def _known_ratios() -> dict[tuple[str, int], float]:
    """(server, batch) -> OEA/baseline decode-step time measured without kit."""
    out = {}
    for path, server in ((SIGNS / "known/triton/moe_decode_step.json", "triton"),
                         (SIGNS / "known/torch/moe_decode_step.json", "torch")):
        rows = json.loads(path.read_text())["rows"]
        us = {(r["impl"], r["batch"], r["arm"]): r["us"] for r in rows if r["part"] == "step"}
        for (impl, batch, arm), t in us.items():
            if arm == "oea":
                out[(f"{impl}/{server}", batch)] = t / us[(impl, batch, "baseline")]
    return out


def test_verdicts_agree_in_sign_with_the_decode_step_measured_without_kit() -> None:
    known = _known_ratios()
    # which known answer each (bundle, arm) is served with: experts implementation / OEA path
    served = {("transformers-h200-eager", "oea"): "eager/triton",
              ("transformers-h200-signs", "oea"): "grouped_mm/triton",
              ("transformers-h200-signs", "oea-torch"): "grouped_mm/torch"}
    checked = 0
    for name in ("transformers-h200-eager", "transformers-h200-signs"):
        _, summary = _read(SIGNS / f"{name}.tar.gz")
        for c in _primary(summary):
            ratio = known.get((served[(name, str(c["arm"]))], int(c["level"])))  # type: ignore[call-overload]
            if ratio is None or abs(math.log(ratio)) < math.log(1.10):
                continue
            checked += 1
            assert c["significant"], c["verdict"]
            assert (c["ratio"] > 1) == (ratio > 1), (c["verdict"], ratio)  # type: ignore[operator]
            lo, hi = c["ratio_ci"]  # type: ignore[misc]
            assert lo <= ratio <= hi or c["level"] > 1, (c["verdict"], ratio)  # c>1 dilutes a step's effect
    assert checked == 3  # eager c=1 and c=4 (OEA faster), torch-ops c=1 (OEA slower)
