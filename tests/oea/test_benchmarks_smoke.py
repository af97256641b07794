"""The GPU benchmarks run end to end on the CPU with tiny shapes, so they cannot rot between GPU runs.

``benchmarks/oea_hook_overhead.py`` (torch only) and ``benchmarks/moe_decode_step.py`` (needs transformers;
skipped without it) run as the lead runs them, in a subprocess, with ``--device cpu``; the checks are on
what they write: every cell present, the distinct-experts counts OEA must not raise, the decode step's
replayable StaticCache step agreeing with a cache-free forward of the same tokens.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from oea_helpers import IMAGE_DIR, ROOT

pytest.importorskip("torch", reason="torch is not installed")

BENCH = ROOT / "benchmarks"


def run_bench(script: str, out: Path, *args: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(IMAGE_DIR), "CUDA_VISIBLE_DEVICES": "", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--device", "cpu", "--out", str(out), *args],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    name = script.replace(".py", "")
    assert (out / f"{name}.md").read_text(encoding="utf-8").strip() in proc.stdout
    return json.loads((out / f"{name}.json").read_text(encoding="utf-8"))


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_hook_overhead_runs_on_cpu(tmp_path: Path) -> None:
    result = run_bench("oea_hook_overhead.py", tmp_path, "--batches", "1,5", "--samples", "2")
    rows = {(r["shape"], r["batch"]): r for r in result["rows"]}
    assert set(rows) == {("glm5", 1), ("glm5", 5), ("qwen3", 1), ("qwen3", 5)}
    for (shape, batch), row in rows.items():
        assert row["torch_ok"] is True  # the timed torch step is the reference itself: a sanity check of check()
        assert 0 < row["T_oea"] <= row["T_plain"] <= batch * 8
        assert row["plain_us"] > 0 and row["modes"] == ["eager"]
        if batch == 1:  # one token keeps only its top-k0
            assert row["T_oea"] == {"glm5": 4, "qwen3": 3}[shape]


@pytest.mark.slow
def test_moe_decode_step_runs_on_cpu(tmp_path: Path) -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    args = ("--shape", "tiny-cpu", "--batches", "1,3", "--impls", "grouped_mm,eager", "--prompt-len", "8",
            "--cell-seconds", "0.05", "--max-samples", "5", "--min-sample-ms", "0.1", "--k0", "2")  # fmt: skip
    result = run_bench("moe_decode_step.py", tmp_path, *args)
    assert result["skipped"] == [] and all(r["us"] is not None for r in result["rows"]), result["rows"]
    cells = {(r["part"], r["impl"], r["batch"], r["arm"]) for r in result["rows"]}
    assert cells == {
        (part, impl, batch, arm)
        for part in ("moe", "step")
        for impl in ("grouped_mm", "eager")
        for batch in (1, 3)
        for arm in ("baseline", "oea")
    }
    for batch, diff in result["step_check_rel_diff"].items():
        assert diff < 1e-4, f"batch {batch}: the replayable step disagrees with a cache-free forward ({diff})"
    for r in result["ratios"]:
        assert r["T_oea"] <= r["T_baseline"] and r["ratio"] > 0
        if r["part"] == "moe" and r["batch"] == 1:
            assert r["T_baseline"] == 4 and r["T_oea"] == 2  # tiny-cpu routes top-4; OEA keeps top-k0 = 2
    moe = [r for r in result["rows"] if r["part"] == "moe"]
    assert all(r["floor_us"] > 0 and r["roofline_frac"] is not None for r in moe)


@pytest.mark.slow
def test_eager_profile_runs_on_cpu(tmp_path: Path) -> None:
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not installed")
    args = ("--shape", "tiny-cpu", "--layers", "2", "--batch", "2", "--steps", "3", "--prompt-len", "8")
    result = run_bench("oea_eager_profile.py", tmp_path, *args)
    assert set(result["arms"]) == {"baseline", "oea"}
    for arm in result["arms"].values():
        assert 0 < arm["enqueue_us_median"] <= arm["wall_us_median"]
        assert arm["top_self_cpu"] and all(t["calls_per_step"] > 0 for t in arm["top_self_cpu"])
    ops = {arm: {t["op"] for t in r["top_self_cpu"]} for arm, r in result["arms"].items()}
    assert "aten::_grouped_mm" in ops["baseline"]  # the experts implementation asked for is the one profiled
