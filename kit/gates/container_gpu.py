"""The container GPU gate: when the docker runtime must pass GPUs through, the engine can do it.

Without the NVIDIA Container Toolkit a container that asks for GPUs is created and then fails to
start with `could not select device driver "" with capabilities: [[gpu]]`. This check asks the
engine first (its registered runtimes, and CDI specs naming nvidia.com/gpu), so the run stops before
anything is created.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from kit.errors import GateFailed, KitError
from kit.gates.result import Check, Timer
from kit.manifest import Manifest
from kit.plumbing.dockerconn import docker_client

NAME = "docker_gpu_runtime"
CDI_DIRS = (Path("/etc/cdi"), Path("/var/run/cdi"))
HINT = ("install the NVIDIA Container Toolkit (package nvidia-container-toolkit), run "
        "`nvidia-ctk runtime configure --runtime=docker` and restart dockerd")


class ContainerGpuEvidence(TypedDict, total=False):
    docker: None  # present (null) when the engine could not be asked
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


def check_container_gpus(m: Manifest, client: Any | None = None) -> Check:
    timer = Timer()
    own = client is None
    try:
        if client is None:
            client = docker_client(error=GateFailed, timeout=10)
        info = client.info()
    except Exception as e:  # noqa: BLE001 - any failure means the engine could not be asked
        why = e.message if isinstance(e, KitError) else f"{type(e).__name__}: {e}"
        return timer.check(NAME, False, f"Docker not reachable ({why}); the manifest runs "
                           f"{m.hardware.gpus} GPU(s) in containers", "start the Docker engine (dockerd)",
                           ContainerGpuEvidence(docker=None))
    finally:
        if own and client is not None:
            client.close()
    runtimes = sorted(info.get("Runtimes") or {})
    cdi = _cdi_specs()
    evidence = ContainerGpuEvidence(runtimes=runtimes, default_runtime=info.get("DefaultRuntime"), cdi_specs=cdi,
                                    server_version=info.get("ServerVersion"))
    if "nvidia" in runtimes or cdi:
        how = "runtime 'nvidia'" if "nvidia" in runtimes else f"CDI spec {cdi[0]}"
        return timer.check(NAME, True, f"Docker can pass GPUs to containers ({how})", None, evidence)
    return timer.check(
        NAME, False,
        f"Docker cannot pass GPUs to containers: no 'nvidia' runtime (runtimes: {', '.join(runtimes) or 'none'}) "
        f"and no CDI spec for nvidia.com/gpu in {' or '.join(map(str, CDI_DIRS))}; the manifest needs "
        f"{m.hardware.gpus} GPU(s)", HINT, evidence)
