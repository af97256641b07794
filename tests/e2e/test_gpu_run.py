"""`kit run` on a machine with real NVIDIA GPUs (tier `gpu`): the GPU gate runs with NVML before every
server start and after every stop, the environment and cell temperatures come from NVML, and a process
that still holds GPU memory (a worker left behind by `pkill`) stops the run naming the GPU and its PID."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from e2e_helpers import bundle_of, kit, read_json, tiny_manifest

pynvml = pytest.importorskip("pynvml")


def _gpu_count() -> int:
    try:
        pynvml.nvmlInit()
        n = int(pynvml.nvmlDeviceGetCount())
        pynvml.nvmlShutdown()
        return n
    except Exception:  # noqa: BLE001 - no driver, no GPU: the tier is skipped
        return 0


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(_gpu_count() == 0, reason="no NVIDIA GPU visible to NVML")]


def test_run_gates_every_cell_with_nvml(tmp_path: Path, port: int, isolated: dict[str, str]) -> None:
    m = tiny_manifest(tmp_path / "g.yaml", port, name="gpu-gated", gpus="all", levels=(1, 4), requests=8, repeats=1)
    t = time.monotonic()
    r = kit("run", str(m), "--out", str(tmp_path / "r"), "--allow-unsigned", env=isolated)
    print(f"KIT-GPU-RUN kit run with gpus=all: exit {r.returncode} in {time.monotonic() - t:.1f} s")
    assert r.returncode == 0, r.stdout + r.stderr
    b = bundle_of(tmp_path / "r")
    env = read_json(b / "environment.json")
    print("KIT-GPU-RUN environment:", env["gpus"].get("driver_version"), [g.get("name") for g in env["gpus"]["gpus"]])
    for cell in ("baseline-r1", "oea-r1"):
        state = read_json(b / f"cells/{cell}/cell.json")
        assert state["status"] == "ok"
        assert state["gpu_temperature_start"]["available"] and state["gpu_temperature_end"]["available"]
        for line in (b / f"cells/{cell}/gates.jsonl").read_text().splitlines():
            report = json.loads(line)
            gpu = next(c for c in report["checks"] if c["name"] == "gpu")
            assert gpu["ok"], gpu
            print(f"KIT-GPU-RUN {cell} {report['phase']}: {gpu['message']} ({gpu['duration_s'] * 1000:.1f} ms)")
    assert kit("verify", str(b), env=isolated).returncode == 0


def test_memory_left_on_a_gpu_stops_the_run_naming_gpu_and_pid(tmp_path: Path, port: int,
                                                              isolated: dict[str, str]) -> None:
    holder = tmp_path / "holder.py"
    holder.write_text(textwrap.dedent("""
        import sys, time, torch
        x = torch.empty(int(2 * 2**30), dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
        print("holding", flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(holder)], stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "holding"
        m = tiny_manifest(tmp_path / "g.yaml", port, name="gpu-dirty", gpus="all", levels=(1,), requests=4,
                          repeats=1)
        text = m.read_text().replace("gates:\n", "gates:\n  gpu_deadline_s: 1\n")
        m.write_text(text)
        r = kit("run", str(m), "--out", str(tmp_path / "r"), "--allow-unsigned", env=isolated)
        print("KIT-GPU-RUN dirty GPU:", r.stderr.strip().splitlines()[:3])
        assert r.returncode == 5, r.stdout + r.stderr
        assert f"PID {proc.pid}" in r.stderr and "GPU 0" in r.stderr
        assert not (tmp_path / "r").exists()  # stopped before anything was written
    finally:
        proc.kill()
        proc.wait()
    r = kit("run", str(m), "--out", str(tmp_path / "r2"), "--allow-unsigned", env=isolated)
    assert r.returncode == 0, r.stderr
