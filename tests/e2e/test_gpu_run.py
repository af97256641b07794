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
import yaml
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


def test_a_live_runs_gpu_is_refused_to_another_kit_and_kit_clean_leaves_it_alone(
        tmp_path: Path, port: int, isolated: dict[str, str]) -> None:
    """The host-wide GPU reservation on a real GPU: run A holds GPU 0 (hardware.gpus: 1) and is paused once its
    server is up; `kit gates` of a manifest naming GPU 0 (hardware.gpu_indices) on another port, by another
    user's kit (another HOME), is refused at once naming run A, with no hint to kill it; `kit clean` stops
    nothing of A's; A then completes."""
    import os
    import signal

    import psutil
    from support.ports import free_port

    from kit.plumbing.poll import poll_until
    from kit.runtime.records import all_record_files, live_owner, read_record

    def with_gpus(path: Path, hardware: dict[str, object]) -> Path:
        m = yaml.safe_load(path.read_text())
        m["hardware"] = hardware
        path.write_text(yaml.safe_dump(m, sort_keys=False))
        return path

    a = with_gpus(tiny_manifest(tmp_path / "a.yaml", port, name="gpu-holder", levels=(1,), requests=40, repeats=1),
                  {"gpus": 1})
    other = with_gpus(tiny_manifest(tmp_path / "b.yaml", free_port(), name="gpu-other", levels=(1,), requests=4,
                                    repeats=1), {"gpus": 1, "gpu_indices": [0]})
    proc = subprocess.Popen([sys.executable, "-m", "kit", "run", str(a), "--out", str(tmp_path / "ra"),
                             "--allow-unsigned"], env={**os.environ, **isolated}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        def serving() -> list[dict[str, object]] | None:
            live = [r for p in all_record_files() if (r := read_record(p)) is not None
                    and psutil.pid_exists(int(r["pgid"])) and live_owner(str(r["run_id"]))]
            return live or None

        live = poll_until(serving, 120, interval=0.05)
        assert live, proc.poll()
        proc.send_signal(signal.SIGSTOP)
        owner = live_owner(str(live[0]["run_id"]))
        assert owner is not None
        home2 = {**isolated, "HOME": str(tmp_path / "home2"), "XDG_STATE_HOME": str(tmp_path / "home2" / "state"),
                 "XDG_CONFIG_HOME": str(tmp_path / "home2" / "config")}
        refused = kit("gates", str(other), env=home2)
        print("KIT-GPU-RUN reserved GPU:", refused.returncode, refused.stdout.strip().splitlines()[-3:],
              refused.stderr.strip().splitlines()[:3])
        cleaned = kit("clean", "--json", env=isolated)
        proc.send_signal(signal.SIGCONT)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)  # SIGINT: ignored where make runs in the background
            proc.wait(timeout=60)
    text = refused.stdout + refused.stderr
    assert refused.returncode == 5, text
    assert f"GPU 0 is reserved by run {owner['run_id']} (kit pid {owner['pid']}" in text and "still running" in text
    assert "kill" not in text
    assert cleaned.returncode == 0 and json.loads(cleaned.stdout)["server_process_groups"] == [], cleaned.stdout
    assert proc.returncode == 0, stdout + stderr
    b = bundle_of(tmp_path / "ra")
    assert read_json(b / "run.json")["status"] == "complete"
