"""Gates: preconditions checked before every server start, after every stop, and by `kit gates` (doctor).

Each check returns a ``Check`` (name, ok, message, hint, evidence, started, duration; ``kit.gates.result``);
``run_gates`` collects them into a ``GateReport`` for the phase, whose ``as_dict()`` is one line of
gates.jsonl (``kit.files.gates.GatesLine``) and whose ``raise_if_failed()`` raises ``GateFailed`` (exit 5)
naming every failure and its fix.

- GPU (``gpu``): only when the manifest uses GPUs; see ``kit.gates.gpu``.
- Container GPUs (``docker_gpu_runtime``): with the docker runtime and GPUs, the engine can pass them
  through (NVIDIA runtime or CDI); see ``kit.gates.container_gpu``.
- CPUs (``cpus``): only when the manifest pins server or load to CPUs; see ``kit.gates.cpus``.
- Ports (``ports``): every port free on the exact address it will be bound on; see ``kit.gates.ports``.
- Leftovers (``leftover_containers``, ``leftover_processes``): no kit server of another run still alive.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

from kit.gates.container_gpu import check_container_gpus
from kit.gates.cpus import check_cpus
from kit.gates.gpu import check_gpus
from kit.gates.leftovers import check_containers, check_process_groups
from kit.gates.ports import check_ports
from kit.gates.result import Check, GateReport, GpuIdentity, Phase
from kit.manifest import Manifest, load_manifest
from kit.nvml import GpuProbe, NvmlProbe
from kit.plumbing.clock import utc_now

PHASES = ("before", "after", "doctor")

__all__ = ["PHASES", "Check", "GateReport", "Phase", "doctor", "run_gates"]


def run_gates(
    m: Manifest,
    *,
    phase: str,
    run_id: str | None = None,
    probe: GpuProbe | None = None,
    docker_client: Any | None = None,
    check_gpu: bool | None = None,
) -> GateReport:
    """Run every gate for ``phase`` ("before" a start, "after" a stop, or "doctor").

    ``check_gpu`` defaults to whether the manifest uses GPUs (``hardware.gpus`` not 0); forcing it on for a
    manifest with 0 GPUs checks all GPUs. ``run_id`` names the current run: leftovers of other runs fail,
    its own fail only "after" a stop. Never raises for a failed check: call ``raise_if_failed()``.
    """
    if phase not in PHASES:
        raise ValueError(f"phase must be one of {', '.join(PHASES)}, not {phase!r}")
    started, t0 = utc_now(), time.monotonic()
    checks: list[Check] = []
    gpus: list[GpuIdentity] = []
    if check_gpu if check_gpu is not None else m.hardware.gpus != 0:
        check, gpus = check_gpus(m, probe if probe is not None else NvmlProbe())
        checks.append(check)
        if m.runtime == "docker" and phase != "after":
            checks.append(check_container_gpus(m, docker_client))
    if (cpus := check_cpus(m)) is not None:
        checks.append(cpus)
    checks.append(check_ports(m))
    checks.append(check_containers(m, run_id=run_id, phase=phase, client=docker_client))
    checks.append(check_process_groups(run_id=run_id, phase=phase))
    return GateReport(phase=cast(Phase, phase), checks=checks, gpus=gpus, run_id=run_id, started=started,
                      duration_s=round(time.monotonic() - t0, 6))


def doctor(manifest_path: str | Path, *, probe: GpuProbe | None = None, docker_client: Any | None = None) -> GateReport:
    """What `kit gates MANIFEST` runs: every gate for this machine, phase "doctor".

    The manifest is loaded and validated (not signature-checked: the gates judge the machine, not the
    manifest); an invalid one raises ManifestError (exit 3).
    """
    m = load_manifest(Path(manifest_path), allow_unpinned=True).manifest
    return run_gates(m, phase="doctor", probe=probe, docker_client=docker_client)
