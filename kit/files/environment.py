"""environment.json's parts as kit.envinfo captures them: the host, the GPUs (null where the driver
cannot tell, with the reason under ``unavailable``), temperatures around a cell, and the git commit."""

from __future__ import annotations

from typing import NotRequired

from pydantic import RootModel
from typing_extensions import TypedDict  # pydantic validates it only from typing_extensions on Python 3.11

from kit.nvml import MemoryMib


class Kernel(TypedDict):
    system: str
    release: str
    version: str
    machine: str


class Cpu(TypedDict):
    model: str | None
    logical_cores: int | None
    physical_cores: int | None
    usable_cores: int
    governors: dict[str, int] | None


class PythonFacts(TypedDict):
    version: str
    implementation: str
    executable: str


class HostFacts(TypedDict):
    """environment.json's ``host``."""

    captured: str
    hostname: str
    kernel: Kernel
    os: dict[str, str] | None
    cpu: Cpu
    memory_total_bytes: int | None
    python: PythonFacts
    packages: dict[str, str | None]
    kit_version: str
    unavailable: dict[str, str]  # what could not be read, and why


class Modes(TypedDict):
    current: int | bool
    pending: int | bool


class PowerLimits(TypedDict):
    enforced: int | None
    default: int | None


class NvLink(TypedDict):
    link: int
    active: bool | None


class GpuFacts(TypedDict):
    """One GPU in environment.json (null where the driver cannot tell; ``unavailable`` says why)."""

    index: int
    name: str | None
    uuid: str | None
    serial: str | None
    vbios: str | None
    pci_bus_id: str | None
    memory: MemoryMib | None
    persistence_mode: bool | None
    mig_mode: Modes | None
    compute_capability: NotRequired[str | None]  # CUDA 'major.minor' (absent in bundles before it was recorded)
    ecc_mode: Modes | None
    ecc_errors: dict[str, int | None]
    power_limit_mw: PowerLimits
    clocks_mhz: dict[str, int | None]
    temperature_c: int | None
    pcie: dict[str, int | None]
    nvlink: list[NvLink] | None
    unavailable: dict[str, str]


class TopologyPair(TypedDict):
    a: int
    b: int
    level: str | None
    code: int | None


class Topology(TypedDict):
    common_ancestor: list[TopologyPair]
    unavailable: dict[str, str]


class GpusFacts(TypedDict, total=False):
    """environment.json's ``gpus``: ``available`` and ``reason`` only when there is no driver."""

    available: bool
    reason: str
    captured: str
    driver_version: str | None
    cuda_driver_version: str | None
    cuda_driver_version_raw: int | None
    nvml_version: str | None
    count: int
    gpus: list[GpuFacts]
    topology: Topology
    unavailable: dict[str, str]


class Temperatures(TypedDict, total=False):
    """GPU temperatures at the start or end of a cell."""

    available: bool
    reason: str
    time: str
    temperature_c: dict[str, int | None]
    unavailable: dict[str, str]


class GitInfo(TypedDict):
    commit: str
    dirty: bool
    dirty_files: list[str]
    branch: str | None
    toplevel: str | None


class SlurmAllocation(TypedDict):
    """environment.json's ``slurm``: the Slurm job a run (or resume) ran in, as its SLURM_* variables say
    (null where the job did not set one). Present only inside a Slurm job."""

    job_id: str
    array_job_id: str | None
    array_task_id: str | None
    job_name: str | None
    cluster: str | None
    partition: str | None
    node_list: str | None
    nodes: int | None
    cpus_on_node: int | None
    job_cpus_per_node: str | None
    gpus_on_node: str | None  # SLURM_GPUS_ON_NODE / SLURM_JOB_GPUS / SLURM_GPUS_PER_NODE, the first set
    submit_host: str | None
    submit_dir: str | None


class EnvironmentDoc(TypedDict, total=False):
    """``environment.json`` (and ``environment.resume-<n>.json``): the machine a run (or resume) ran on."""

    host: HostFacts
    runtime: dict[str, object]
    gpus: GpusFacts
    git: GitInfo | None
    slurm: SlurmAllocation


class EnvironmentFile(RootModel[EnvironmentDoc]):
    """``environment.json`` as a model, for ``bundle.schema.json``."""
