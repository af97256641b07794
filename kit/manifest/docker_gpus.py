"""The manifest's ``server.docker_gpus``: how the docker runtime passes GPUs into a container (its own module so
that models.py stays under the size limit). What each mode creates: ``kit.runtime.docker.gpus``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from kit.manifest.models import Manifest


class DockerGpus(BaseModel):
    """How the docker runtime passes GPUs into a container."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    mode: Literal["nvidia", "cdi", "devices"] = Field(
        "nvidia", description="nvidia (default): a GPU DeviceRequest, fulfilled by the NVIDIA Container Toolkit "
        "(docker run --gpus); cdi: CDI device names nvidia.com/gpu=<UUID> (Docker 25+ with CDI specs, Podman); "
        "devices: for hosts without the toolkit, kit passes the GPUs' device nodes (/dev/nvidia<minor>, "
        "/dev/nvidiactl, /dev/nvidia-uvm, ...) and mounts the driver's folder read-only.",
    )
    driver_dir: str | None = Field(
        None, pattern=r"^/[^\x00]*$", max_length=4096,
        description="mode devices: the host folder of the NVIDIA driver's libcuda.so.1 (in it, lib64/ or lib/) and "
        "bin/nvidia-smi, mounted read-only at the same path. Default: /usr/local/nvidia when it holds the driver, "
        "else the driver's files found among the system libraries, mounted one by one under /usr/local/nvidia.",
    )
    ulimits: bool = Field(
        True, description="With GPUs a container gets memlock unlimited and a 64 MiB stack (what sglang's GPU "
        "workers want). false: the engine's defaults, for engines that cannot raise RLIMIT_MEMLOCK (a dockerd "
        "without CAP_SYS_RESOURCE fails such a container's start).",
    )


def check_docker_gpus(m: Manifest) -> None:
    """Refuse GPU settings that nothing would use."""
    g = m.server.docker_gpus
    if m.runtime != "docker" and g != DockerGpus():
        raise ValueError(f"server.docker_gpus is for runtime docker; this manifest's runtime is {m.runtime}: remove it")
    if g.driver_dir is not None and g.mode != "devices":
        raise ValueError(f"server.docker_gpus.driver_dir is used by mode devices only (mode is {g.mode}): remove it")
