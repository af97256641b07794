"""Two runs on one host on disjoint GPUs (hardware.gpu_indices): another kit process (a real one, holding real
flocks) passes its gates on GPUs 0-1 of a fake 4-GPU NVML and reserves them; this process's run on GPUs 2-3
passes the same gates, reserves them and gives its server exactly those (CUDA_VISIBLE_DEVICES for the process
runtime, the DeviceRequest's ids for docker), while a run that overlaps (GPU 1, or the default first two) is
refused by the gate and by the reservation, naming the run that owns the GPU."""

from __future__ import annotations

import json
import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_nvml import FakeProbe
from gate_helpers import FakeDocker, make_manifest
from pydantic import ValidationError
from support.manifests import manifest_data, manifest_model

from kit.errors import GateFailed
from kit.gates import run_gates
from kit.gates.reserve import reserve
from kit.manifest import Manifest
from kit.plan import make_plan
from kit.runtime.docker.gpus import nvidia_args
from kit.server_spec import server_spec

ME = pwd.getpwuid(os.geteuid()).pw_name  # the user owner_text names: the run lock's owner
ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import json, sys, time
from pathlib import Path
from fake_nvml import FakeProbe
from gate_helpers import FakeDocker
from support.manifests import manifest_data, manifest_model
from kit.gates import run_gates
from kit.gates.reserve import reserve
m = manifest_model(manifest_data("holder", command=["true"], served_name="m", hardware=json.loads(sys.argv[1])))
report = run_gates(m, phase="before", probe=FakeProbe.idle(4), docker_client=FakeDocker())
reserve(m, "other1", Path("/results/holder-bundle"))
print("held" if report.ok else "gates failed", [g["index"] for g in report.gpus], flush=True)
time.sleep(600)
"""


def _on(indices: list[int] | None, gpus: int = 2, runtime: str = "process") -> Manifest:
    m = make_manifest(gpus=gpus, runtime=runtime)
    hardware = {"gpus": gpus, **({"gpu_indices": indices} if indices is not None else {})}
    return manifest_model({**m.model_dump(mode="json", exclude_none=True), "hardware": hardware})


@pytest.fixture
def holder(state_home: Path) -> Iterator[subprocess.Popen[str]]:
    """Run ``other1`` in another kit process, on GPUs 0 and 1."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps({"gpus": 2, "gpu_indices": [0, 1]})],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}:{ROOT / 'tests' / 'gates'}"})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held [0, 1]"
    yield proc
    proc.kill()
    proc.wait()


def test_disjoint_gpus_share_a_host_and_overlapping_ones_are_refused_naming_the_owner(
        holder: subprocess.Popen[str], no_docker: FakeDocker) -> None:
    probe = FakeProbe.idle(4)
    mine = _on([2, 3])
    report = run_gates(mine, phase="before", probe=probe, docker_client=no_docker)
    assert report.ok, report.as_dict()
    assert [g["index"] for g in report.gpus] == [2, 3]
    uuids = [probe.gpus[2].uuid, probe.gpus[3].uuid]
    assert [g["uuid"] for g in report.gpus] == uuids
    held = reserve(mine, "mine", Path("/results/mine"))
    try:
        cell = make_plan(mine).cells[0]
        spec = server_spec(mine, cell, "mine", Path("/tmp/server.log"), gpus=[g["uuid"] for g in report.gpus])
        assert spec.env["CUDA_VISIBLE_DEVICES"] == ",".join(uuids)  # the process runtime: exactly these
        dspec = server_spec(_on([2, 3], runtime="docker"), cell, "mine", Path("/tmp/server.log"), gpus=uuids)
        assert dspec.gpus == uuids
        requests: list[Any] = nvidia_args(dspec.gpus).device_requests  # the docker runtime: exactly these
        assert [list(r["DeviceIDs"]) for r in requests] == [uuids]
    finally:
        held.release()
    whose = f"run other1 (kit pid {holder.pid}, user {ME}, experiment holder, bundle /results/holder-bundle)"
    for overlapping, gpu in (([1, 2], 1), (None, 0)):  # GPU 1; the default: the first two
        m = _on(overlapping)
        check = next(c for c in run_gates(m, phase="before", probe=probe, docker_client=no_docker).checks
                     if c.name == "gpu")
        assert not check.ok and f"GPU {gpu} is reserved by {whose}, which is still running" in check.message
        assert check.hint is not None and "hardware.gpu_indices" in check.hint
        with pytest.raises(GateFailed, match=f"GPU {gpu} is reserved by run other1 \\(kit pid {holder.pid}"):
            reserve(m, "mine", Path("/results/mine"))
    every = next(c for c in run_gates(make_manifest(gpus="all"), phase="before", probe=probe,
                                      docker_client=no_docker).checks if c.name == "gpu")
    assert not every.ok and f"GPU 0 is reserved by {whose}" in every.message


def test_gpu_indices_must_exist_be_distinct_and_match_the_count(no_docker: FakeDocker, state_home: Path) -> None:
    check = next(c for c in run_gates(_on([1, 5]), phase="before", probe=FakeProbe.idle(4),
                                      docker_client=no_docker).checks if c.name == "gpu")
    assert not check.ok and "hardware.gpu_indices [1, 5] names GPU 5, but this host has 4" in check.message
    for bad, words in (([0, 0], "names a GPU twice"), ([0], "lists 1 GPU(s) but gpus is 2: set gpus: 1")):
        with pytest.raises(ValidationError, match=re.escape(words)):
            manifest_model(manifest_data(command=["true"], served_name="m", hardware={"gpus": 2, "gpu_indices": bad}))
