"""The GPU gate on real NVIDIA GPUs (marker ``gpu``; skipped where NVML cannot start).

Run on the device machine:  python3 -m pytest -m gpu tests/gates -s -p no:cacheprovider
Lines starting with ``KIT-GPU`` are the evidence to quote. Set ``KIT_NVML_FIXTURE_OUT`` to a file path to
save the environment capture (the fixture tests/data/nvml/h200_env.json came from such a run).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gate_helpers import make_manifest

from kit.envinfo import capture_gpus, capture_host, gpu_temperatures
from kit.gates import run_gates
from kit.gates.gpu import check_gpus
from kit.nvml import NvmlError, NvmlProbe


def _gpu_count() -> int:
    probe = NvmlProbe()
    try:
        probe.init()
    except NvmlError:
        return 0
    try:
        return probe.device_count()
    finally:
        probe.shutdown()


GPUS = _gpu_count()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(GPUS == 0, reason="NVML cannot start or sees no GPU")]

HOLDER = """
import sys, time, torch
gib = float(sys.argv[1])
x = torch.empty(int(gib * 2**30), dtype=torch.uint8, device="cuda")
x.fill_(1)
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(3600)
"""

# A job that starts one holder per GPU (like a server's per-GPU workers) and waits; killing it alone
# leaves the holders running.
PARENT = """
import os, subprocess, sys, time
holder, gib, uuids = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
kids = [subprocess.Popen([sys.executable, holder, gib], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": u}) for u in uuids]
for k in kids:
    assert k.stdout.readline().strip() == "ready"
print(" ".join(str(k.pid) for k in kids), flush=True)
time.sleep(3600)
"""


def say(line: str) -> None:
    print(f"KIT-GPU {line}", flush=True)


def uuids() -> list[str]:
    probe = NvmlProbe()
    probe.init()
    try:
        return [probe.uuid(i) for i in range(probe.device_count())]
    finally:
        probe.shutdown()


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("gpu-scripts")
    (d / "holder.py").write_text(HOLDER)
    (d / "parent.py").write_text(PARENT)
    return {"holder": d / "holder.py", "parent": d / "parent.py"}


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Orphans reparent to this process, so the test can reap them and time the reap."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_child_subreaper = 36
    assert libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0
    yield
    libc.prctl(pr_set_child_subreaper, 0, 0, 0, 0)


def start_holder(scripts: dict[str, Path], uuid: str, gib: float) -> subprocess.Popen[str]:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": uuid}
    proc = subprocess.Popen([sys.executable, str(scripts["holder"]), str(gib)], stdout=subprocess.PIPE,
                            text=True, env=env, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def gate(deadline_s: float, threshold_mib: int = 256) -> tuple[Any, list[dict[str, Any]]]:
    return check_gpus(make_manifest(gpus="all", gpu_deadline_s=deadline_s, threshold_mib=threshold_mib), NvmlProbe())


def test_1_idle_gpus_pass_with_v2_zero_where_v1_says_615(state_home: Path) -> None:
    report = run_gates(make_manifest(gpus="all", gpu_deadline_s=10), phase="doctor")
    for c in report.checks:
        say(f"idle {c.name}: ok={c.ok} {c.message}")
    gpu = next(c for c in report.checks if c.name == "gpu")
    assert gpu.ok, gpu.message
    for g in gpu.evidence["gpus"]:
        say(f"idle GPU {g['index']} {g['uuid']} {g['name']}: v2 used {g['used_mib']} MiB, reserved "
            f"{g['reserved_mib']} MiB, v1 used {g['v1_used_mib']} MiB, total {g['total_mib']} MiB")
        assert g["used_mib"] <= 256 and g["v1_used_mib"] >= (g["reserved_mib"] or 0)
    say(f"idle gate verdict clean after {gpu.evidence['clean_after_s'] * 1000:.2f} ms, {gpu.evidence['polls']} poll(s)")
    assert report.gpus and len(report.gpus) == GPUS


def test_2_holder_on_one_gpu_fails_naming_gpu_and_pid(scripts: dict[str, Path]) -> None:
    target = GPUS - 1
    holder = start_holder(scripts, uuids()[target], 2.0)
    try:
        t0 = time.monotonic()
        check, _ = gate(deadline_s=0.5)
        say(f"holder: gate ok={check.ok} after {time.monotonic() - t0:.2f} s: {check.message}")
        say(f"holder: hint: {check.hint}")
        assert not check.ok
        assert f"GPU {target} (" in check.message and f"PID {holder.pid} " in check.message
        dirty = [g["index"] for g in check.evidence["gpus"] if not g["clean"]]
        assert dirty == [target]
    finally:
        kill_group(holder.pid)
        holder.wait()
    check, _ = gate(deadline_s=10)
    say(f"holder killed: gate ok={check.ok}, clean {check.evidence.get('clean_after_s')} s after the first poll")
    assert check.ok


def test_3_parent_killed_alone_leaves_children_holding_memory(scripts: dict[str, Path], subreaper: None) -> None:
    targets = uuids()[:2]
    if len(targets) == 1:
        targets *= 2  # one GPU: both children on it
    children: list[int] = []
    parent = subprocess.Popen([sys.executable, str(scripts["parent"]), str(scripts["holder"]), "8", ",".join(targets)],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    pgid = parent.pid
    try:
        assert parent.stdout is not None
        children += [int(p) for p in parent.stdout.readline().split()]
        say(f"job: parent PID {parent.pid} (pgid {pgid}) started children {children} on {len(targets)} GPU(s)")
        parent.kill()  # the parent ALONE
        parent.wait()
        alive = [c for c in children if Path(f"/proc/{c}").exists()]
        say(f"job: parent killed alone; children still alive: {alive}")
        assert alive == children
        check, _ = gate(deadline_s=2.0)
        say(f"job orphans: gate ok={check.ok}: {check.message}")
        say(f"job orphans: hint: {check.hint}")
        for g in check.evidence["gpus"]:
            say(f"job orphans: GPU {g['index']}: v2 used {g['used_mib']} MiB (v1 {g['v1_used_mib']}), "
                f"processes {[(p['pid'], p['used_mib']) for p in g['processes']]}")
        assert not check.ok
        for child in children:
            assert f"PID {child} " in check.message
        assert f"kill -TERM -- -{pgid}" in check.message
        t_kill = time.monotonic()
        os.killpg(pgid, signal.SIGTERM)
        for child in children:
            os.waitpid(child, 0)  # ours to reap, as the subreaper
        t_reaped = time.monotonic()
        check, _ = gate(deadline_s=10)
        say(f"job group killed (SIGTERM to -{pgid}): children reaped {t_reaped - t_kill:.3f} s after the signal; "
            f"gate ok={check.ok}: {check.message}")
        assert check.ok
    finally:
        kill_group(pgid)
        for child in children:
            try:
                os.waitpid(child, os.WNOHANG)
            except ChildProcessError:
                pass


def test_4_time_from_last_reap_to_clean_verdict(scripts: dict[str, Path]) -> None:
    tries = 5
    rows = []
    uuid0 = uuids()[0]
    for n in range(tries):
        holder = start_holder(scripts, uuid0, 1.0)
        result: dict[str, Any] = {}

        def watch(result: dict[str, Any] = result) -> None:
            check, _ = gate(deadline_s=30)
            result["t_clean"] = time.monotonic()
            result["check"] = check

        watcher = threading.Thread(target=watch)
        try:
            watcher.start()
            time.sleep(0.1)  # let the gate see the holder: it must be polling a dirty GPU
            assert "check" not in result, "gate passed while a holder was alive"
            t_kill = time.monotonic()
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            t_reap = time.monotonic()
            watcher.join(timeout=30)
        finally:
            kill_group(holder.pid)
            holder.wait()
        check = result["check"]
        assert check.ok, check.message
        row = {"kill_to_reap": t_reap - t_kill, "reap_to_clean": result["t_clean"] - t_reap,
               "kill_to_clean": result["t_clean"] - t_kill, "polls": check.evidence["polls"]}
        rows.append(row)
        say(f"timing try {n + 1}: SIGKILL->reap {row['kill_to_reap'] * 1000:.1f} ms, "
            f"reap->clean verdict {row['reap_to_clean'] * 1000:+.1f} ms, "
            f"SIGKILL->clean {row['kill_to_clean'] * 1000:.1f} ms ({row['polls']} polls)")
    reap_to_clean = [r["reap_to_clean"] * 1000 for r in rows]
    say(f"timing reap->clean over {tries} tries: median {statistics.median(reap_to_clean):+.1f} ms, "
        f"max {max(reap_to_clean):+.1f} ms (goal <= 100 ms; negative = clean before the reap)")
    assert max(reap_to_clean) <= 100


def test_5_environment_capture() -> None:
    doc = {"host": capture_host(), "gpus": capture_gpus(NvmlProbe()),
           "temperatures": gpu_temperatures(NvmlProbe(), list(range(GPUS)))}
    g = doc["gpus"]
    assert g["available"] is True
    say(f"env: driver {g['driver_version']}, CUDA driver {g['cuda_driver_version']}, NVML {g['nvml_version']}, "
        f"{g['count']} GPU(s), topology {[(p['a'], p['b'], p['level']) for p in g['topology']['common_ancestor']]}")
    for gpu in g["gpus"]:
        links = gpu["nvlink"]
        active = None if links is None else sum(1 for link in links if link["active"])
        say(f"env GPU {gpu['index']}: {gpu['name']} {gpu['uuid']} serial {gpu['serial']} vbios {gpu['vbios']} "
            f"memory {gpu['memory']} persistence {gpu['persistence_mode']} mig {gpu['mig_mode']} "
            f"ecc {gpu['ecc_mode']} power {gpu['power_limit_mw']} clocks {gpu['clocks_mhz']} "
            f"temp {gpu['temperature_c']} pcie {gpu['pcie']} nvlink active {active} of "
            f"{None if links is None else len(links)}; unavailable: {gpu['unavailable']}")
    out = os.environ.get("KIT_NVML_FIXTURE_OUT")
    if out:
        Path(out).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        say(f"env: capture saved to {out}")


def test_6_compute_capability_matches_the_cuda_runtime() -> None:
    """NVML's compute capability against the CUDA runtime's own (torch), on every GPU; the gate then passes a
    manifest for this family and refuses one for another (an SM120 manifest on an H200)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    probe = NvmlProbe()
    probe.init()
    try:
        nvml = [probe.compute_capability(i) for i in range(GPUS)]
    finally:
        probe.shutdown()
    cuda = sorted(torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count()))
    say(f"compute capability: NVML {nvml}, CUDA runtime {cuda}")
    assert sorted(nvml) == cuda
    mine = f"{nvml[0][0]}.{nvml[0][1]}"
    other = "9.0" if mine != "9.0" else "12.0"
    assert check_gpus(make_manifest(gpus="all", compute_capability=[mine]), NvmlProbe())[0].ok
    check, _ = check_gpus(make_manifest(gpus="all", compute_capability=[other]), NvmlProbe())
    assert not check.ok and f"has compute capability {mine}; the manifest is for {other}" in check.message
