"""The experiment manifest's pydantic models: every field, its constraints and the cross-field rules.

The JSON Schema (``manifest.schema.json``) is generated from these models by ``kit.manifest.loading``;
model names and field order determine it, so renaming or reordering here changes the schema.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from kit.manifest.analysis import Analysis
from kit.manifest.design import Design
from kit.manifest.docker_gpus import DockerGpus, check_docker_gpus
from kit.manifest.expert_pass import ExpertPass
from kit.manifest.fields import (
    DAY_S,
    IMAGE_REF_RE,
    PINNED_RE,
    CpuList,
    Env,
    EnvName,
    Port,
)
from kit.manifest.hardware import Hardware
from kit.manifest.hostpaths import check_model_placeholder, host_path_problem
from kit.manifest.load import Load
from kit.manifest.names import Name
from kit.manifest.quality import Quality
from kit.manifest.ranks import Ranks, check_ranks
from kit.manifest.workload import tls_problem
from kit.safeyaml import clip, excerpt

SCHEMA_ID = "urn:kit:manifest:1"
SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_FILE = "manifest.schema.json"

# GPUs come from hardware.gpus and the GPU gate; these would override the gated selection.
GPU_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"})
# Shown prominently by `kit plan`, not refused: they change what code the server loads.
LOADER_ENV = frozenset({"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONSTARTUP"})


def _check_env_names(names: list[str], where: str) -> None:
    gpu = sorted(GPU_ENV.intersection(names))
    if gpu:
        raise ValueError(
            f"{', '.join(gpu)} in {where} would override the GPUs kit checked: remove it; GPUs come from "
            "hardware.gpus and the GPU gate (the docker runtime sets NVIDIA_VISIBLE_DEVICES, the process runtime "
            "CUDA_VISIBLE_DEVICES, to exactly the gated GPUs)"
        )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class ModelSpec(_Model):
    """The model being served."""

    served_name: str = Field(min_length=1, max_length=200, description="Name clients send as 'model'.")
    path: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="Host directory with the weights; mounted read-only at 'mount_at' in containers.",
    )
    mount_at: str = Field("/model", pattern=r"^/", max_length=4096,
                          description="Where the weights appear in the container.")
    digest: bool = Field(
        False,
        description="Record the sha256 tree of 'path' (every file's sha256, one digest over the sorted list; "
        "kit.plumbing.treedigest) in the bundle's signed provenance when the run completes. Reads every byte of the "
        "model (about a second per GB).",
    )

    @field_validator("path")
    @classmethod
    def _safe_path(cls, v: str | None) -> str | None:
        why = host_path_problem(v) if v is not None else None
        if why:
            raise ValueError(
                f"{why}; refusing to expose it to the server. Give the directory that holds only the model's "
                "weights (not /, a system directory, the Docker socket, $HOME, or ~/.config/kit)"
            )
        return v


class Server(_Model):
    """How each arm's server is started and probed. Placeholders in 'command' and 'args':
    {host}, {port}, {model_path}, {served_name}, {python} (the Python running kit), and for servers that span
    nodes {node_rank}, {nnodes}, {dist_init_addr} (rank 0's host:ranks.dist_init_port; on one node 0, 1 and
    server.host:ranks.dist_init_port)."""

    command: list[Annotated[str, Field(max_length=4096)]] = Field(
        min_length=1, description="The server's argv (for docker: the container's command)."
    )
    host: str = Field("127.0.0.1", max_length=256, description="Address the port is bound or published on.")
    port: Port = Field(description="Port the server listens on (published on 'host' for docker).")
    container_port: Port | None = Field(None, description="Port inside the container (default: 'port').")
    extra_ports: list[Port] = Field(default_factory=list, description="Other ports the server is known to open.")
    scheme: Literal["http", "https"] = Field("http", description="How kit talks to the server: https verifies it "
                                             "with load.request.ca_bundle / verify_tls (docs/https.md).")
    readiness_path: str = Field("/health", pattern=r"^/", description="HTTP path that answers 200 when ready.")
    ready_timeout_s: float = Field(600.0, gt=0, le=DAY_S, description=f"Deadline for readiness, in seconds (at most "
                                   f"{DAY_S}, a day).")
    info_path: str | None = Field(
        None, pattern=r"^/", description="HTTP path where the engine describes itself (sglang: /server_info, its "
        "resolved arguments, max_total_num_tokens and version; with the kit OEA patch also the patch's marker), read "
        "once per cell after readiness into cells/<id>/server_info.json (secrets redacted). Default: not read.",
    )
    stop_grace_s: float = Field(30.0, ge=0, le=3600, description="Grace between SIGTERM and SIGKILL, in seconds (at "
                                "most 3600, an hour).")
    log_limit_mb: int = Field(
        256, ge=1, le=1 << 20, description="The most each of a cell's server logs (server.log, server.rankR.log) "
        "keeps, in MiB: past it the log keeps its start and its last 4 MiB (a quarter of a smaller limit), with a line "
        "saying how many bytes were left out between them (also the cell's stop.log_dropped_bytes).",
    )
    shm_size: str | None = Field(None, pattern=r"^[0-9]+[bkmg]?$", description="Container /dev/shm size, e.g. 32g.")
    ipc_host: bool = Field(False, description="Share the host's IPC namespace (then shm_size is ignored).")
    cpus: CpuList | None = Field(
        None, description="CPUs every arm's server runs on, as a Linux CPU list ('2-7', '0,2,4-6'): the process "
        "runtime pins the server's process (and so all it starts), docker sets the container's cpuset. Default: "
        "wherever the scheduler puts it. Give a launch-bound server (eager PyTorch decoding) cores that load.cpus "
        "and other work do not use.",
    )
    env: Env = Field(default_factory=dict, description="Environment for every arm's server.")
    pass_env: list[EnvName] = Field(
        default_factory=list,
        description="Names of variables passed through from the user's environment (e.g. HF_TOKEN). "
        "Their values are secrets: masked (***) in every bundle file, log and message kit writes, also as a server, "
        "an error body or a metric's label echoes them (JSON-escaped, base64 or URL-encoded too).",
    )
    docker_gpus: DockerGpus = Field(default_factory=DockerGpus, description="runtime docker: how GPUs reach it.")

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        _check_env_names(list(v), "server.env")
        return v

    @field_validator("pass_env")
    @classmethod
    def _pass_env(cls, v: list[str]) -> list[str]:
        _check_env_names(v, "server.pass_env")
        own = sorted(n for n in v if n.upper().startswith("KIT_"))
        if own:
            raise ValueError(f"{clip(', '.join(own))}: kit's own variables (KIT_*, e.g. the runner key's passphrase) "
                             "are never passed to a server: remove them from pass_env")
        return v

    @field_validator("host")
    @classmethod
    def _ip(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"{excerpt(v)} is not an IP address (use e.g. 127.0.0.1 or 0.0.0.0)") from None
        return v


class ImageSpec(_Model):
    """A Docker image built from a context under images/."""

    context: str = Field(
        pattern=r"^images/[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?$",
        description="Build context, relative to the project root (the directory holding images/).",
    )
    dockerfile: str = Field("Dockerfile", pattern=r"^[A-Za-z0-9_.-]+$")
    base: str | None = Field(
        None,
        pattern=IMAGE_REF_RE,
        description="Base image, pinned as name:tag@sha256:digest (or a local image ID sha256:...). "
        "Passed to the build as the BASE_IMAGE build arg.",
    )
    base_arm: Name | None = Field(None, description="Build FROM the image of this other arm of the same run.")
    build_args: Env = Field(default_factory=dict)

    @field_validator("context")
    @classmethod
    def _inside_project(cls, v: str) -> str:
        if any(part in (".", "..") for part in v.rstrip("/").split("/")):
            raise ValueError(f"{excerpt(v)} has a '.' or '..' component; a build context is a plain path under images/ "
                             "inside the project (e.g. images/engine)")
        return v

    @model_validator(mode="after")
    def _one_base(self) -> ImageSpec:
        if (self.base is None) == (self.base_arm is None):
            raise ValueError("give exactly one of 'base' (a pinned image) or 'base_arm' (another arm's image)")
        return self


class Arm(_Model):
    """One side of the A/B comparison."""

    name: Name
    description: str = ""
    image: ImageSpec | None = Field(None, description="Image for the docker runtime.")
    command: list[str] | None = Field(None, min_length=1, description="Replaces server.command for this arm.")
    args: list[str] = Field(default_factory=list, description="Appended to the server command.")
    env: Env = Field(default_factory=dict, description="Environment overrides for this arm.")

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        _check_env_names(list(v), "the arm's env")
        return v


class Gates(_Model):
    """Preconditions checked before every server start and after every stop."""

    gpu_memory_threshold_mib: Annotated[int, Field(ge=0, le=1 << 20)] = Field(
        256, description="A GPU is clean when NVML v2 'used' memory is at or below this and no process runs (at "
        "most 1048576, 1 TiB)."
    )
    gpu_deadline_s: float = Field(60.0, gt=0, le=DAY_S, description="How long to poll for clean GPUs, in seconds "
                                  f"(at most {DAY_S}, a day).")
    port_deadline_s: float = Field(10.0, ge=0, le=DAY_S, description="How long to wait for ports to become free, in "
                                   f"seconds (at most {DAY_S}, a day).")
    ports: list[Port] = Field(default_factory=list, description="More ports that must be free.")


class Manifest(_Model):
    """One A/B (or A/B/n) serving experiment."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, allow_inf_nan=False, title="kit experiment manifest"
    )

    manifest_version: Literal[1] = 1
    name: Name
    description: str = ""
    template: bool = Field(
        False, description="A template, not an experiment: kit validate, plan, sign and compose take it, kit run and "
        "kit submit refuse it. It may pin placeholder digests. To make it real: pin its bases (`kit lock`), give "
        "model.path on the machine that runs it, remove 'template', sign it again.",
    )
    hardware: Hardware = Field(default_factory=Hardware)
    runtime: Literal["docker", "process", "slurm"] = Field(
        description="How servers start: 'process' (a process group here), 'docker' (a container here), or 'slurm' "
        "(one rank per node of the Slurm allocation kit runs in, see 'ranks'; kit submit makes the allocation)."
    )
    model: ModelSpec
    server: Server
    arms: list[Arm] = Field(min_length=2, max_length=16)
    load: Load
    design: Design = Field(default_factory=Design)
    quality: Quality | None = Field(None, description="An untimed few-shot accuracy check per cell (optional).")
    expert_pass: ExpertPass | None = Field(
        None, description="Distinct experts per layer per decode step, per arm, from an untimed server with the "
        "engine's expert-distribution recorder on, after the timed cells (optional, descriptive).")
    gates: Gates = Field(default_factory=Gates)
    analysis: Analysis = Field(default_factory=Analysis)
    ranks: Ranks = Field(default_factory=Ranks, description="Servers of one rank per node (runtime: slurm).")

    @field_validator("arms")
    @classmethod
    def _arms(cls, arms: list[Arm], info: ValidationInfo) -> list[Arm]:
        names = [a.name for a in arms]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"arm names must be unique; repeated: {', '.join(dupes)}")
        runtime = info.data.get("runtime")
        for arm in arms:
            if runtime == "docker" and arm.image is None:
                raise ValueError(f"arm {arm.name!r} needs an 'image' because runtime is docker")
            if arm.image is not None and arm.image.base_arm is not None:
                if arm.image.base_arm not in names or arm.image.base_arm == arm.name:
                    raise ValueError(f"arm {arm.name!r}: image.base_arm must name another arm")
                base = next(a for a in arms if a.name == arm.image.base_arm)
                if base.image is None or base.image.base_arm is not None:
                    raise ValueError(f"arm {arm.name!r}: base arm {base.name!r} must build from a pinned base")
        return arms

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        names = [a.name for a in self.arms]
        if self.analysis.baseline is not None and self.analysis.baseline not in names:
            raise ValueError(f"analysis.baseline {self.analysis.baseline!r} is not an arm ({', '.join(names)})")
        ports = [self.server.port, *self.server.extra_ports, *self.gates.ports]
        if len(set(ports)) != len(ports):
            raise ValueError("server.port, server.extra_ports and gates.ports must not repeat a port")
        check_ranks(self)
        check_model_placeholder(self)
        check_docker_gpus(self)
        if (tls := tls_problem(self.server.scheme, self.load.request)) is not None:
            raise ValueError(tls)
        return self

    @property
    def baseline_arm(self) -> str:
        return self.analysis.baseline or self.arms[0].name

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def unpinned_bases(self) -> list[tuple[str, str]]:
        """(arm, base) for every image base that is not pinned by digest."""
        return [
            (a.name, a.image.base)
            for a in self.arms
            if a.image is not None and a.image.base is not None and not PINNED_RE.match(a.image.base)
        ]

