"""What machine a run ran on: host, CPU, kernel, packages, and the GPUs as NVML sees them.

Nothing here is fatal. A value that cannot be read is recorded as null, with the reason under
``unavailable`` beside it (e.g. an NVML query that is not supported or not permitted on this GPU).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

import kit
from kit.files.environment import (
    Cpu,
    GitInfo,
    GpuFacts,
    GpusFacts,
    HostFacts,
    Kernel,
    Modes,
    NvLink,
    PowerLimits,
    PythonFacts,
    SlurmAllocation,
    Temperatures,
    Topology,
    TopologyPair,
)
from kit.nvml import Domain, GpuProbe, NoDriverError, NvmlError, Which
from kit.plumbing.clock import utc_now

T = TypeVar("T")

PACKAGES = (
    "click", "pydantic", "pydantic-core", "jsonschema", "PyYAML", "cryptography", "docker", "nvidia-ml-py",
    "locust", "gevent", "geventhttpclient", "numpy", "aiohttp", "matplotlib", "rich", "psutil", "torch", "sglang",
)

DOMAINS: tuple[Domain, ...] = ("sm", "mem")
WHICH: tuple[Which, ...] = ("current", "max")
TOPOLOGY_LEVELS = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}


def _try(unavailable: dict[str, str], key: str, fn: Callable[[], T]) -> T | None:
    """``fn()``, or None with the reason recorded under ``unavailable[key]``."""
    try:
        return fn()
    except NvmlError as e:
        unavailable[key] = e.reason
    except (OSError, ValueError, IndexError, KeyError) as e:
        unavailable[key] = f"{type(e).__name__}: {e}"
    return None


# --------------------------------------------------------------------------- host


def _os_release() -> dict[str, str]:
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        pairs = (line.split("=", 1) for line in lines if "=" in line)
        doc = {k: v.strip().strip('"') for k, v in pairs}
        return {k: doc[k] for k in ("PRETTY_NAME", "ID", "VERSION_ID") if k in doc}
    raise FileNotFoundError("no os-release file")


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith(("model name", "Model")) and ":" in line:
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _physical_cores() -> int:
    """Distinct (physical id, core id) pairs in /proc/cpuinfo."""
    cores: set[tuple[str, str]] = set()
    physical = core = ""
    for line in [*Path("/proc/cpuinfo").read_text().splitlines(), ""]:
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "physical id":
            physical = value
        elif key == "core id":
            core = value
        elif not line.strip() and core:
            cores.add((physical, core))
            physical = core = ""
    if not cores:
        raise ValueError("no core ids in /proc/cpuinfo")
    return len(cores)


def _governors() -> dict[str, int]:
    """How many CPUs use each cpufreq governor."""
    files = sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_governor"))
    if not files:
        raise FileNotFoundError("no cpufreq scaling_governor in /sys (no frequency scaling exposed here)")
    return dict(Counter(f.read_text().strip() for f in files))


def _memory_total_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise ValueError("no MemTotal in /proc/meminfo")


def _packages() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def capture_host() -> HostFacts:
    """Host, kernel, OS, CPU, memory, Python and package versions, kit's version."""
    unavailable: dict[str, str] = {}
    uname = platform.uname()
    return HostFacts(
        captured=utc_now(),
        hostname=socket.gethostname(),
        kernel=Kernel(system=uname.system, release=uname.release, version=uname.version, machine=uname.machine),
        os=_try(unavailable, "os", _os_release),
        cpu=Cpu(
            model=_try(unavailable, "cpu.model", _cpu_model),
            logical_cores=os.cpu_count(),
            physical_cores=_try(unavailable, "cpu.physical_cores", _physical_cores),
            usable_cores=len(os.sched_getaffinity(0)),
            governors=_try(unavailable, "cpu.governors", _governors),
        ),
        memory_total_bytes=_try(unavailable, "memory_total_bytes", _memory_total_bytes),
        python=PythonFacts(version=platform.python_version(), implementation=platform.python_implementation(),
                           executable=sys.executable),
        packages=_packages(),
        kit_version=kit.__version__,
        unavailable=unavailable,
    )


# --------------------------------------------------------------------------- GPUs


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _ecc_errors(u: dict[str, str], probe: GpuProbe, i: int) -> dict[str, int | None]:
    out = {}
    for counter in ("volatile", "aggregate"):
        for kind in ("corrected", "uncorrected"):
            fn = partial(probe.ecc_errors, i, uncorrected=kind == "uncorrected", aggregate=counter == "aggregate")
            out[f"{counter}_{kind}"] = _try(u, f"ecc_errors.{counter}_{kind}", fn)
    return out


def _clocks(u: dict[str, str], probe: GpuProbe, i: int) -> dict[str, int | None]:
    return {
        f"{domain}_{which}": _try(u, f"clocks_mhz.{domain}_{which}", partial(probe.clock_mhz, i, domain, which))
        for domain in DOMAINS
        for which in WHICH
    }


def _pcie(u: dict[str, str], probe: GpuProbe, i: int) -> dict[str, int | None]:
    out = {}
    for what in ("generation", "width"):
        for which in WHICH:
            fn = partial(probe.pcie, i, width=what == "width", which=which)
            out[f"{what}_{which}"] = _try(u, f"pcie.{what}_{which}", fn)
    return out


def _gpu(probe: GpuProbe, i: int) -> GpuFacts:
    u: dict[str, str] = {}
    mem = _try(u, "memory", partial(probe.memory, i))
    mig = _try(u, "mig_mode", partial(probe.mig_mode, i))
    cc = _try(u, "compute_capability", partial(probe.compute_capability, i))
    ecc = _try(u, "ecc_mode", partial(probe.ecc_mode, i))
    links = _try(u, "nvlink", partial(probe.nvlink_links, i))
    return GpuFacts(
        index=i,
        name=_try(u, "name", partial(probe.name, i)),
        uuid=_try(u, "uuid", partial(probe.uuid, i)),
        serial=_try(u, "serial", partial(probe.serial, i)),
        vbios=_try(u, "vbios", partial(probe.vbios, i)),
        pci_bus_id=_try(u, "pci_bus_id", partial(probe.pci_bus_id, i)),
        memory=None if mem is None else mem.as_mib(),
        persistence_mode=_try(u, "persistence_mode", partial(probe.persistence_mode, i)),
        mig_mode=None if mig is None else Modes(current=mig[0], pending=mig[1]),
        compute_capability=None if cc is None else f"{cc[0]}.{cc[1]}",
        ecc_mode=None if ecc is None else Modes(current=ecc[0], pending=ecc[1]),
        ecc_errors=_ecc_errors(u, probe, i),
        power_limit_mw=PowerLimits(
            enforced=_try(u, "power_limit_mw.enforced", partial(probe.power_limit_mw, i, default=False)),
            default=_try(u, "power_limit_mw.default", partial(probe.power_limit_mw, i, default=True)),
        ),
        clocks_mhz=_clocks(u, probe, i),
        temperature_c=_try(u, "temperature_c", partial(probe.temperature_c, i)),
        pcie=_pcie(u, probe, i),
        nvlink=None if links is None else [NvLink(link=n, active=a) for n, a in enumerate(links)],
        unavailable=u,
    )


def _topology(probe: GpuProbe, count: int) -> Topology:
    pairs: list[TopologyPair] = []
    unavailable: dict[str, str] = {}
    for a in range(count):
        for b in range(a + 1, count):
            level = _try(unavailable, f"{a}-{b}", partial(probe.topology, a, b))
            pairs.append(TopologyPair(a=a, b=b, level=None if level is None else TOPOLOGY_LEVELS.get(level, str(level)),
                                      code=level))
    return Topology(common_ancestor=pairs, unavailable=unavailable)


def capture_gpus(probe: GpuProbe) -> GpusFacts:
    """Driver, CUDA driver and NVML versions, every GPU's identity and settings, and the topology.

    Without a driver: ``{"available": False, "reason": ...}``.
    """
    try:
        probe.init()
    except NvmlError as e:
        reason = f"no NVIDIA driver found ({e.reason})" if isinstance(e, NoDriverError) else e.reason
        return GpusFacts(available=False, reason=reason)
    try:
        u: dict[str, str] = {}
        cuda = _try(u, "cuda_driver_version", probe.cuda_driver_version)
        count = probe.device_count()
        return GpusFacts(
            available=True,
            captured=utc_now(),
            driver_version=_try(u, "driver_version", probe.driver_version),
            cuda_driver_version=None if cuda is None else _cuda_version(cuda),
            cuda_driver_version_raw=cuda,
            nvml_version=_try(u, "nvml_version", probe.nvml_version),
            count=count,
            gpus=[_gpu(probe, i) for i in range(count)],
            topology=_topology(probe, count),
            unavailable=u,
        )
    except NvmlError as e:
        return GpusFacts(available=False, reason=f"NVML failed: {e.reason}")
    finally:
        probe.shutdown()


def gpu_temperatures(probe: GpuProbe, indices: list[int]) -> dict[str, object]:
    """Temperatures (°C) of the given GPUs now, for the start and end of a cell (a ``Temperatures``;
    a plain dict while the experiment's cell state is one)."""
    return {**_temperatures(probe, indices)}


def _temperatures(probe: GpuProbe, indices: list[int]) -> Temperatures:
    try:
        probe.init()
    except NvmlError as e:
        return Temperatures(available=False, reason=e.reason, time=utc_now())
    try:
        unavailable: dict[str, str] = {}
        temps = {str(i): _try(unavailable, str(i), partial(probe.temperature_c, i)) for i in indices}
        return Temperatures(available=True, time=utc_now(), temperature_c=temps, unavailable=unavailable)
    finally:
        probe.shutdown()



def git_info(directory: Path) -> GitInfo | None:
    """The git commit of the repository holding ``directory`` (the manifest's), or None outside git."""

    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=10,
                               check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return GitInfo(
        commit=commit,
        dirty=bool(status),
        dirty_files=status.splitlines()[:50] if status else [],
        branch=git("rev-parse", "--abbrev-ref", "HEAD"),
        toplevel=git("rev-parse", "--show-toplevel"),
    )


def slurm_allocation(environ: dict[str, str] | None = None) -> SlurmAllocation | None:
    """The Slurm job this process runs in, from the SLURM_* variables slurmd sets; None outside a job."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID")
    if not job:
        return None

    def text(*names: str) -> str | None:
        return next((env[n] for n in names if env.get(n)), None)

    def number(name: str) -> int | None:
        v = env.get(name, "")
        return int(v) if v.isdigit() else None

    return SlurmAllocation(
        job_id=job, array_job_id=text("SLURM_ARRAY_JOB_ID"), array_task_id=text("SLURM_ARRAY_TASK_ID"),
        job_name=text("SLURM_JOB_NAME"), cluster=text("SLURM_CLUSTER_NAME"), partition=text("SLURM_JOB_PARTITION"),
        node_list=text("SLURM_JOB_NODELIST", "SLURM_NODELIST"), nodes=number("SLURM_JOB_NUM_NODES"),
        cpus_on_node=number("SLURM_CPUS_ON_NODE"), job_cpus_per_node=text("SLURM_JOB_CPUS_PER_NODE"),
        gpus_on_node=text("SLURM_GPUS_ON_NODE", "SLURM_JOB_GPUS", "SLURM_GPUS_PER_NODE"),
        submit_host=text("SLURM_SUBMIT_HOST"), submit_dir=text("SLURM_SUBMIT_DIR"),
    )
