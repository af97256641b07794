"""The container GPU gate: when the docker runtime must pass GPUs through, the engine (or kit) can do it in the
manifest's ``server.docker_gpus.mode``, checked before anything is created:

    nvidia   the engine has the NVIDIA runtime (without the NVIDIA Container Toolkit a container that asks for
             GPUs is created and then fails to start with `could not select device driver "" with
             capabilities: [[gpu]]`)
    cdi      the engine is Docker 25+ (its "cdi" device driver) and a CDI spec names nvidia.com/gpu
    devices  the driver lists the GPUs, each has its device node, the control nodes exist, and the driver's
             folder holds libcuda.so.1: the evidence is the device nodes and mounts each container gets

That the container then sees exactly the GPUs asked for is checked in it once it serves
(``kit.runtime.docker.gpus.gpus_seen``, nvidia-smi inside the container; server.json's ``gpus_seen``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from kit.errors import GateFailed, KitError
from kit.gates.result import Check, Timer
from kit.manifest import Manifest
from kit.plumbing.dockerconn import ask_docker
from kit.runtime.docker.gpus import devices_args

NAME = "docker_gpu_runtime"
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
HINT = ("install the NVIDIA Container Toolkit (package nvidia-container-toolkit), run "
        "`nvidia-ctk runtime configure --runtime=docker` and restart dockerd")


class ContainerGpuEvidence(TypedDict, total=False):
    mode: str  # server.docker_gpus.mode
    docker: None  # present (null) when the engine could not be asked
    devices: list[str]  # mode devices: host:container:permissions of every GPU the driver lists
    mounts: list[str]  # mode devices: the driver's files, host -> container (read-only)
    runtimes: list[str]
    default_runtime: str | None
    cdi_specs: list[str]
    server_version: str | None


def _cdi_specs() -> list[str]:
    out = []
    for d in CDI_DIRS:
        if d.is_dir():
            for f in sorted(d.iterdir()):
                try:
                    if "nvidia.com/gpu" in f.read_text(errors="replace"):
                        out.append(str(f))
                except OSError:
                    continue
    return out


def check_devices(m: Manifest) -> Check:
    """Mode devices: what every container would get, for all the GPUs the driver lists (the GPU gate picks)."""
    timer = Timer()
    driver_dir = m.server.docker_gpus.driver_dir
    try:
        args = devices_args("all", driver_dir)
    except KitError as e:
        return timer.check(NAME, False, f"kit cannot pass GPUs as device nodes: {e.message}",
                           e.hint or "set server.docker_gpus.driver_dir, or choose mode nvidia or cdi",
                           ContainerGpuEvidence(mode="devices"))
    mounts = [f"{mt['Source']} -> {mt['Target']}" for mt in args.mounts]
    return timer.check(NAME, True, f"kit passes GPUs as device nodes ({len(args.devices)} nodes, driver "
                       f"{', '.join(mounts[:1])}{' ...' if len(mounts) > 1 else ''} read-only)", None,
                       ContainerGpuEvidence(mode="devices", devices=args.devices, mounts=mounts))


def _major(version: str | None) -> int:
    head = (version or "").split(".", 1)[0]
    return int(head) if head.isdigit() else 0


def check_container_gpus(m: Manifest, client: Any | None = None) -> Check:
    mode = m.server.docker_gpus.mode
    if mode == "devices":
        return check_devices(m)
    timer = Timer()
    info, why = ask_docker(lambda c: c.info(), client, error=GateFailed)
    if info is None:
        return timer.check(NAME, False, f"Docker not reachable ({why}); the manifest runs "
                           f"{m.hardware.gpus} GPU(s) in containers", "start the Docker engine (dockerd)",
                           ContainerGpuEvidence(mode=mode, docker=None))
    runtimes = sorted(info.get("Runtimes") or {})
    cdi = _cdi_specs()
    version = info.get("ServerVersion")
    evidence = ContainerGpuEvidence(mode=mode, runtimes=runtimes, default_runtime=info.get("DefaultRuntime"),
                                    cdi_specs=cdi, server_version=version)
    if mode == "cdi":
        ok = bool(cdi) and _major(version) >= 25
        return timer.check(
            NAME, ok, f"Docker {version} {'can' if ok else 'cannot'} pass CDI devices nvidia.com/gpu "
            f"(CDI specs: {', '.join(cdi) or 'none'} in {' or '.join(map(str, CDI_DIRS))}; needs Docker 25+)",
            None if ok else "generate the spec (`nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`) on Docker "
            "25+, or choose server.docker_gpus.mode nvidia (the toolkit's runtime) or devices", evidence)
    if "nvidia" in runtimes or cdi:
        how = "runtime 'nvidia'" if "nvidia" in runtimes else f"CDI spec {cdi[0]}"
        return timer.check(NAME, True, f"Docker can pass GPUs to containers ({how})", None, evidence)
    return timer.check(
        NAME, False,
        f"Docker cannot pass GPUs to containers: no 'nvidia' runtime (runtimes: {', '.join(runtimes) or 'none'}) "
        f"and no CDI spec for nvidia.com/gpu in {' or '.join(map(str, CDI_DIRS))}; the manifest needs "
        f"{m.hardware.gpus} GPU(s)", HINT + "; or set server.docker_gpus.mode: devices (kit passes the device nodes "
        "and the driver itself)", evidence)
