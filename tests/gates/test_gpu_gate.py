"""The GPU gate against FakeProbe: clean, dirty, released mid-poll, deadline, identity, no driver."""

from __future__ import annotations

import os
import pwd
import re
import subprocess
import time

import pytest
from fake_nvml import FakeGpu, FakeProbe
from gate_helpers import FakeDocker, make_manifest

from kit.errors import ExitCode, GateFailed
from kit.gates import Check, doctor, run_gates
from kit.gates.gpu import check_gpus
from kit.nvml import GpuProcess

GIB = 1024


def gpu_check(checks: list[Check], name: str = "gpu") -> Check:
    return next(c for c in checks if c.name == name)


def test_idle_gpus_pass_with_v2_zero_while_v1_says_615(no_docker: FakeDocker, state_home: object) -> None:
    probe = FakeProbe.idle(8)
    report = run_gates(make_manifest(gpus=8), phase="before", probe=probe, docker_client=no_docker)
    assert report.ok, report.as_dict()
    check = gpu_check(report.checks)
    gpus = check.evidence["gpus"]
    assert [g["used_mib"] for g in gpus] == [0] * 8
    assert [g["v1_used_mib"] for g in gpus] == [615] * 8  # a v1 gate would never pass
    assert [g["reserved_mib"] for g in gpus] == [615] * 8
    assert check.evidence["polls"] == 1 and check.evidence["clean_after_s"] < 0.05
    assert "v1 says 615 MiB" in check.message
    assert [g["index"] for g in report.gpus] == list(range(8))
    assert report.gpus[3] == {"index": 3, "uuid": probe.gpus[3].uuid, "name": "NVIDIA H200"}
    assert probe.inits == 0  # init and shutdown balanced


def test_count_checks_the_first_n_by_index_and_says_so() -> None:
    probe = FakeProbe.idle(4)
    check, gpus = check_gpus(make_manifest(gpus=2), probe)
    assert check.ok
    assert [g["index"] for g in gpus] == [0, 1]
    assert check.evidence["selection"] == "the first 2 of 4 GPUs by index"
    assert check.message.startswith("the first 2 of 4 GPUs by index clean")


def test_all_checks_every_gpu() -> None:
    check, gpus = check_gpus(make_manifest(gpus="all"), FakeProbe.idle(3))
    assert check.ok and len(gpus) == 3 and check.evidence["selection"] == "all 3 GPUs"


def test_memory_held_on_one_gpu_fails_naming_that_gpu_and_pid() -> None:
    probe = FakeProbe.idle(2)
    pid = os.getpid()
    probe.gpus[1].used_mib = 9626
    probe.gpus[1].processes = [GpuProcess(pid=pid, used_bytes=9626 * 1024 * 1024)]
    t0 = time.monotonic()
    check, gpus = check_gpus(make_manifest(gpus=2, gpu_deadline_s=0.2), probe)
    assert not check.ok
    assert time.monotonic() - t0 < 1.0
    uuid1 = probe.gpus[1].uuid
    assert f"GPU 1 ({uuid1[:12]}…): 9.4 GiB used by 1 process: PID {pid} " in check.message
    assert "GPU 0" not in check.message
    assert f"user {pwd.getpwuid(os.getuid()).pw_name}, pgid" in check.message
    assert f"pgid {os.getpgrp()}" in check.message
    # a process kit did not start: `kit clean` would not stop it, so it is not offered (the kill command is)
    assert "fix: kill -TERM" in check.message and "kit clean" not in check.message
    assert check.hint and check.hint.startswith("kill -TERM")
    held = check.evidence["gpus"][1]
    assert held["processes"][0]["pid"] == pid and held["processes"][0]["used_mib"] == 9626
    assert held["processes"][0]["cmdline"]  # read from /proc
    assert held["v1_used_mib"] == 9626 + 615
    assert gpus[1]["uuid"] == uuid1  # identified even when dirty


def test_failure_names_the_process_group_to_kill() -> None:
    probe = FakeProbe.idle(1)
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        probe.gpus[0].used_mib = 2048
        probe.gpus[0].processes = [GpuProcess(pid=child.pid, used_bytes=None)]
        check, _ = check_gpus(make_manifest(gpus=1, gpu_deadline_s=0.05), probe)
        assert f"PID {child.pid} sleep" in check.message
        assert f"kill -TERM -- -{child.pid}" in check.message
        # no server kit recorded: `kit clean` would stop nothing of it (a review followed that hint, to no effect)
        assert check.hint == f"kill -TERM -- -{child.pid}"
    finally:
        child.kill()
        child.wait()


def test_memory_released_mid_poll_passes_before_the_deadline_and_records_the_time() -> None:
    probe = FakeProbe.idle(2)
    probe.gpus[0].used_mib = 8192
    probe.gpus[0].processes = [GpuProcess(pid=4242, used_bytes=8192 << 20)]
    probe.gpus[0].release_after_s = 0.15
    t0 = time.monotonic()
    check, _ = check_gpus(make_manifest(gpus=2, gpu_deadline_s=5.0), probe)
    elapsed = time.monotonic() - t0
    assert check.ok, check.message
    # upper bounds are liveness (it stops once clean), with room for a loaded machine: timings are not asserted
    assert 0.15 <= check.evidence["clean_after_s"] < 5.0
    assert elapsed < 5.0
    assert check.evidence["polls"] >= 5  # polled every ~10 ms, not slept through
    assert check.evidence["polls"] <= check.evidence["clean_after_s"] / 0.009 + 2  # and never faster


def test_deadline_is_respected() -> None:
    probe = FakeProbe.idle(1)
    probe.gpus[0].used_mib = 1000
    t0 = time.monotonic()
    check, _ = check_gpus(make_manifest(gpus=1, gpu_deadline_s=0.25), probe)
    elapsed = time.monotonic() - t0
    assert not check.ok
    # the deadline is waited out in full, and then the check stops (the upper bounds are liveness, with room
    # for a loaded machine: timings are not asserted)
    assert 0.25 <= check.evidence["waited_s"] <= elapsed < 0.25 + 5.0
    assert re.search(r"GPUs not clean after \d+(\.\d+)? s", check.message), check.message
    assert "NVML lists no process" in check.message


def test_processes_without_memory_still_fail() -> None:
    probe = FakeProbe.idle(1)
    probe.gpus[0].used_mib = 12  # below the threshold
    probe.gpus[0].processes = [GpuProcess(pid=999_999_999, used_bytes=12 << 20)]
    check, _ = check_gpus(make_manifest(gpus=1, gpu_deadline_s=0.05), probe)
    assert not check.ok
    assert "12 MiB used by 1 process: PID 999999999 (not visible in /proc" in check.message


def test_threshold_is_inclusive() -> None:
    probe = FakeProbe.idle(1)
    probe.gpus[0].used_mib = 256
    check, _ = check_gpus(make_manifest(gpus=1, threshold_mib=256), probe)
    assert check.ok
    probe.gpus[0].used_mib = 257
    check, _ = check_gpus(make_manifest(gpus=1, threshold_mib=256, gpu_deadline_s=0.02), probe)
    assert not check.ok


def test_fewer_gpus_than_needed_fails_at_once() -> None:
    t0 = time.monotonic()
    check, gpus = check_gpus(make_manifest(gpus=8, gpu_deadline_s=10), FakeProbe.idle(2))
    assert time.monotonic() - t0 < 0.5
    assert not check.ok and gpus == []
    assert check.message == "only 2 NVIDIA GPU(s) found (driver 580.159.04); the manifest needs 8 GPUs (hardware.gpus: 8)"
    assert check.evidence["available"] == 2


def test_no_gpus_fails_at_once() -> None:
    check, _ = check_gpus(make_manifest(gpus="all", gpu_deadline_s=10), FakeProbe([]))
    assert not check.ok
    assert check.message.startswith("no NVIDIA GPU found (driver 580.159.04); the manifest needs all GPUs")


def test_mig_mode_fails_at_once_with_evidence() -> None:
    probe = FakeProbe.idle(2)
    probe.gpus[1].mig = (1, 1)
    t0 = time.monotonic()
    check, gpus = check_gpus(make_manifest(gpus=2, gpu_deadline_s=10), probe)
    assert time.monotonic() - t0 < 0.5
    assert not check.ok and len(gpus) == 2
    assert "GPU 1 (" in check.message and "MIG mode" in check.message and "GPU 0" not in check.message
    assert check.evidence["mig"] == [{"index": 1, "current": 1, "pending": 1}]
    assert check.hint and "-mig 0" in check.hint


def test_mig_disabled_but_supported_passes() -> None:
    probe = FakeProbe.idle(1)
    probe.gpus[0].mig = (0, 0)
    assert check_gpus(make_manifest(gpus=1), probe)[0].ok


def test_wrong_gpu_name_fails_at_once() -> None:
    probe = FakeProbe([FakeGpu(uuid="GPU-aaaa-0", name="NVIDIA H200"), FakeGpu(uuid="GPU-bbbb-1", name="NVIDIA H100")])
    check, _ = check_gpus(make_manifest(gpus=2, gpu_name="NVIDIA H200", gpu_deadline_s=10), probe)
    assert not check.ok
    assert check.message == "GPU 1 (GPU-bbbb-1…) is a 'NVIDIA H100'; the manifest needs 'NVIDIA H200'"
    assert check_gpus(make_manifest(gpus=1, gpu_name="NVIDIA H200"), probe)[0].ok


def test_compute_capability_refuses_another_gpu_family_naming_both() -> None:
    """An NVFP4 manifest pinned for SM120 (RTX PRO 6000) must not run on an H200 (SM90, where sglang would
    serve NVFP4 as Marlin W4A16): the gate fails at once, naming the GPU, what it reports and the field."""
    probe = FakeProbe([FakeGpu(uuid="GPU-aaaa-0", name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                               compute_capability=(12, 0)),
                       FakeGpu(uuid="GPU-bbbb-1", name="NVIDIA H200", compute_capability=(9, 0))])
    check, _ = check_gpus(make_manifest(gpus=2, compute_capability=["12.0"], gpu_deadline_s=10), probe)
    assert not check.ok and check.duration_s < 5
    assert check.message == (
        "GPU 1 (GPU-bbbb-1…) (NVIDIA H200) has compute capability 9.0; the manifest is for 12.0 "
        "(hardware.compute_capability): its pinned kernel paths would not be the ones measured there")
    assert "hardware.compute_capability" in (check.hint or "")
    assert check.evidence["compute_capability"] == [
        {"index": 0, "compute_capability": "12.0", "reason": None},
        {"index": 1, "compute_capability": "9.0", "reason": None}]
    assert check_gpus(make_manifest(gpus=1, compute_capability=["12.0"]), probe)[0].ok
    assert check_gpus(make_manifest(gpus=2, compute_capability=["12.0", "9.0"]), probe)[0].ok
    assert "compute_capability" not in check_gpus(make_manifest(gpus=2), probe)[0].evidence


def test_compute_capability_nvml_cannot_read_is_refused_with_the_reason() -> None:
    probe = FakeProbe([FakeGpu(uuid="GPU-aaaa-0", compute_capability=None)])
    check, _ = check_gpus(make_manifest(gpus=1, compute_capability=["12.0"]), probe)
    assert not check.ok
    assert check.message == ("GPU 0 (GPU-aaaa-0…): NVML cannot tell its compute capability (Not Supported); "
                             "the manifest needs 12.0 (hardware.compute_capability)")
    assert check.evidence["compute_capability"] == [{"index": 0, "compute_capability": None, "reason": "Not Supported"}]


def test_v1_only_driver_gates_on_v1_and_says_so() -> None:
    probe = FakeProbe([FakeGpu(uuid="GPU-old-0", reserved_mib=None, used_mib=10)])
    check, _ = check_gpus(make_manifest(gpus=1), probe)
    assert check.ok and "(v1 only)" in check.message
    assert check.evidence["gpus"][0]["memory_info_version"] == 1


def test_no_driver_is_gate_failed_exit_5_naming_8_gpus(no_docker: FakeDocker, state_home: object) -> None:
    report = run_gates(make_manifest(gpus=8), phase="doctor", probe=FakeProbe(no_driver=True), docker_client=no_docker)
    assert not report.ok and report.gpus == []
    check = gpu_check(report.checks)
    assert check.message == (
        "no NVIDIA driver found (NVML Shared Library Not Found); the manifest needs 8 GPUs (hardware.gpus: 8)"
    )
    with pytest.raises(GateFailed) as info:
        report.raise_if_failed()
    assert info.value.exit_code == ExitCode.GATE_FAILED == 5
    assert "no NVIDIA driver found" in str(info.value) and "needs 8 GPUs" in str(info.value)
    assert "Hint:" in str(info.value)


def test_doctor_on_the_oea_manifest_without_a_driver(root: object, state_home: object) -> None:
    from pathlib import Path

    report = doctor(Path(str(root)) / "experiments" / "oea.yaml", probe=FakeProbe(no_driver=True),
                    docker_client=FakeDocker())
    assert report.phase == "doctor"
    with pytest.raises(GateFailed) as info:
        report.raise_if_failed()
    message = str(info.value)
    assert "no NVIDIA driver found" in message
    assert "the manifest needs 8 GPUs" in message


def test_real_probe_without_a_driver_is_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    """NvmlProbe maps NVMLError_LibraryNotFound / DriverNotLoaded to NoDriverError, never a traceback."""
    import pynvml

    from kit.nvml import NoDriverError, NvmlProbe

    for code in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED):
        def boom(code: int = code) -> None:
            raise pynvml.NVMLError(code)

        monkeypatch.setattr(pynvml, "nvmlInit", boom)
        with pytest.raises(NoDriverError):
            NvmlProbe().init()
        check, _ = check_gpus(make_manifest(gpus=8), NvmlProbe())
        assert check.message.startswith("no NVIDIA driver found (")
        assert check.message.endswith("the manifest needs 8 GPUs (hardware.gpus: 8)")


def test_no_gpu_gate_when_the_manifest_uses_none(no_docker: FakeDocker, state_home: object) -> None:
    report = run_gates(make_manifest(gpus=0), phase="before", probe=FakeProbe(no_driver=True), docker_client=no_docker)
    assert report.ok and [c.name for c in report.checks] == ["ports", "leftover_containers", "leftover_processes"]
    forced = run_gates(make_manifest(gpus=0), phase="before", probe=FakeProbe.idle(2), docker_client=no_docker,
                       check_gpu=True)
    assert gpu_check(forced.checks).evidence["selection"] == "all 2 GPUs"


def test_report_as_dict_is_a_jsonl_line(no_docker: FakeDocker, state_home: object) -> None:
    import json

    report = run_gates(make_manifest(gpus=1), phase="after", run_id="r1", probe=FakeProbe.idle(1),
                       docker_client=no_docker)
    line = json.loads(json.dumps(report.as_dict()))
    assert line["phase"] == "after" and line["ok"] is True and line["run_id"] == "r1"
    assert {c["name"] for c in line["checks"]} == {"gpu", "ports", "leftover_containers", "leftover_processes"}
    for c in line["checks"]:
        assert set(c) == {"name", "ok", "message", "hint", "evidence", "started", "duration_s"}
        assert c["started"].endswith("Z") and c["duration_s"] >= 0
    assert line["gpus"][0]["index"] == 0


def test_unknown_phase_is_a_bug() -> None:
    with pytest.raises(ValueError, match="phase"):
        run_gates(make_manifest(), phase="during")
