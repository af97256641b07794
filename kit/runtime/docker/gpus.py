"""GPUs into a container, three ways (``server.docker_gpus.mode``): one function per mode turns "these GPUs"
into ``containers.create`` arguments.

    nvidia   a DeviceRequest for the engine's NVIDIA driver (the NVIDIA Container Toolkit's hook does the rest)
    cdi      a DeviceRequest with driver "cdi" naming ``nvidia.com/gpu=<id>`` (Docker 25+ with CDI specs, Podman)
    devices  what the toolkit would do, done by kit for hosts without it: the GPUs' device nodes
             (/dev/nvidia<minor>), the driver's control nodes, and the driver's folder (libcuda.so.1,
             nvidia-smi) mounted read-only, with LD_LIBRARY_PATH pointing at it

GPUs are named by UUID (what the GPU gate hands over) or NVML index. In ``devices`` mode a UUID becomes its
device minor through the driver's own table, /proc/driver/nvidia/gpus/*/information ("GPU UUID", "Device
Minor", "Bus Location"); an index counts GPUs in PCI bus order, as NVML does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypedDict

from docker.types import DeviceRequest, Mount

from kit.errors import ServerError

GpuMode = Literal["nvidia", "cdi", "devices"]
GPU_MODES: tuple[GpuMode, ...] = ("nvidia", "cdi", "devices")
PROC_GPUS = Path("/proc/driver/nvidia/gpus")
DEV = Path("/dev")
CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
REQUIRED_NODES = ("nvidiactl", "nvidia-uvm")  # without these CUDA cannot start; the others when present
DRIVER_DIRS = (Path("/usr/local/nvidia"),)  # a self-contained driver folder (GKE, the H200 machine)
LIB_DIRS = (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib64"), Path("/usr/lib"), Path("/lib/x86_64-linux-gnu"))
BIN_DIRS = (Path("/usr/bin"), Path("/usr/local/bin"))
IN_CONTAINER = "/usr/local/nvidia"  # where a driver found among system libraries is mounted, file by file
DRIVER_LIB_RE = re.compile(r"^lib(cuda|cudadebugger|nvidia-[a-z0-9-]+|nvcuvid|nvoptix)\.so(\.[0-9.]+)?$")
DRIVER_BINS = ("nvidia-smi", "nvidia-debugdump")
MAX_INFO_BYTES = 64 * 1024


@dataclass(frozen=True)
class GpuArgs:
    """The part of ``containers.create``'s arguments that passes GPUs."""

    device_requests: list[DeviceRequest] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)  # "host:container:rwm"
    mounts: list[Mount] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)


def _ids(gpus: list[str]) -> list[str]:
    ids = [str(g) for g in gpus]
    if not ids or any(not g or "," in g or "=" in g for g in ids):
        raise ServerError(f"invalid GPU list {gpus!r}: give GPU UUIDs or indices, 'all', or none")
    return ids


def nvidia_args(gpus: list[str] | Literal["all"]) -> GpuArgs:
    """``--gpus``: a DeviceRequest the NVIDIA Container Toolkit's hook fulfils."""
    if gpus == "all":
        return GpuArgs([DeviceRequest(count=-1, capabilities=[["gpu"]])], environment={"NVIDIA_VISIBLE_DEVICES": "all"})
    ids = _ids(gpus)
    return GpuArgs([DeviceRequest(device_ids=ids, capabilities=[["gpu"]])],
                   environment={"NVIDIA_VISIBLE_DEVICES": ",".join(ids)})


def cdi_args(gpus: list[str] | Literal["all"]) -> GpuArgs:
    """CDI device names (``nvidia.com/gpu=<UUID|index|all>``) as the engine's "cdi" device driver takes them
    (what `docker run --device nvidia.com/gpu=0` sends). NVIDIA_VISIBLE_DEVICES=void: the CDI spec, not a hook,
    decides what the container gets."""
    names = ["nvidia.com/gpu=all"] if gpus == "all" else [f"nvidia.com/gpu={g}" for g in _ids(gpus)]
    return GpuArgs([DeviceRequest(driver="cdi", device_ids=names)], environment={"NVIDIA_VISIBLE_DEVICES": "void"})


# --------------------------------------------------------------------------- devices mode


@dataclass(frozen=True)
class GpuNode:
    uuid: str
    minor: int
    bus: str


def driver_gpus(proc: Path | None = None) -> list[GpuNode]:
    """The GPUs the loaded driver knows, in PCI bus order (NVML's index order), from its /proc table."""
    proc = proc or PROC_GPUS
    if not proc.is_dir():
        raise ServerError(f"no NVIDIA driver table at {proc}: the devices GPU mode needs the NVIDIA kernel driver "
                          "loaded on this host", hint="run on a GPU host, or choose server.docker_gpus.mode nvidia/cdi")
    out = []
    for info in sorted(proc.glob("*/information")):
        with open(info, "rb") as f:
            text = f.read(MAX_INFO_BYTES).decode(errors="replace")
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        try:
            out.append(GpuNode(uuid=fields["GPU UUID"], minor=int(fields["Device Minor"]),
                               bus=fields.get("Bus Location", info.parent.name).lower()))
        except (KeyError, ValueError):
            raise ServerError(f"{info}: no 'GPU UUID' and 'Device Minor' lines the devices GPU mode can read") from None
    return sorted(out, key=lambda g: g.bus)


def select_gpus(gpus: list[str] | Literal["all"], known: list[GpuNode]) -> list[GpuNode]:
    """The driver's GPUs named by UUID or index, in the order given."""
    if gpus == "all":
        return known
    by_uuid = {g.uuid: g for g in known}
    out = []
    for g in _ids(gpus):
        if g in by_uuid:
            out.append(by_uuid[g])
        elif g.isdigit() and int(g) < len(known):
            out.append(known[int(g)])
        else:
            listed = ", ".join(k.uuid for k in known) or "none"
            raise ServerError(f"GPU {g!r} is not one the NVIDIA driver lists ({listed})")
    return out


@dataclass(frozen=True)
class Driver:
    """The driver's user-space files as the container gets them: (host path, container path) mounts, read-only."""

    mounts: tuple[tuple[str, str], ...]
    lib_dirs: tuple[str, ...]  # in the container: LD_LIBRARY_PATH
    bin_dirs: tuple[str, ...]  # in the container: where nvidia-smi is (PATH is the image's own)


def _lib_subdirs(root: Path) -> list[Path]:
    return [d for d in (root / "lib64", root / "lib", root) if (d / "libcuda.so.1").exists()]


def find_driver(driver_dir: str | None, lib_dirs: tuple[Path, ...] | None = None,
                bin_dirs: tuple[Path, ...] | None = None, driver_dirs: tuple[Path, ...] | None = None) -> Driver:
    """The driver's folder (``driver_dir``, else the first of ``driver_dirs`` holding libcuda.so.1) mounted at its
    own path; else, a driver installed among the system libraries: its files (libcuda, libnvidia-*, nvidia-smi)
    one by one under /usr/local/nvidia, never a whole system library folder."""
    lib_dirs, bin_dirs = lib_dirs or LIB_DIRS, bin_dirs or BIN_DIRS
    driver_dirs = driver_dirs or DRIVER_DIRS
    roots = [Path(driver_dir)] if driver_dir else list(driver_dirs)
    for root in roots:
        libs = _lib_subdirs(root)
        if libs:
            smi = (root / "bin" / "nvidia-smi").exists()
            return Driver(((str(root), str(root)),), tuple(map(str, libs)), (str(root / "bin"),) if smi else ())
    if driver_dir:
        raise ServerError(f"server.docker_gpus.driver_dir {driver_dir!r} holds no libcuda.so.1 (nor lib64/ or lib/ "
                          "with it)", hint="name the folder of the NVIDIA driver's libcuda.so.1 and nvidia-smi")
    for d in lib_dirs:
        if (d / "libcuda.so.1").exists():
            files = sorted(p for p in d.iterdir() if DRIVER_LIB_RE.match(p.name))
            mounts = [(str(p), f"{IN_CONTAINER}/lib64/{p.name}") for p in files]
            bins = [next(b / n for b in bin_dirs if (b / n).exists()) for n in DRIVER_BINS
                    if any((b / n).exists() for b in bin_dirs)]
            mounts += [(str(b), f"{IN_CONTAINER}/bin/{b.name}") for b in bins]
            return Driver(tuple(mounts), (f"{IN_CONTAINER}/lib64",), (f"{IN_CONTAINER}/bin",) if bins else ())
    where = ", ".join(map(str, [*driver_dirs, *lib_dirs]))
    raise ServerError(f"no NVIDIA driver libraries (libcuda.so.1) in {where}",
                      hint="set server.docker_gpus.driver_dir to the folder holding libcuda.so.1 and nvidia-smi")


def _is_char_device(p: Path) -> bool:
    try:
        return p.is_char_device()
    except OSError:
        return False


def devices_args(gpus: list[str] | Literal["all"], driver_dir: str | None = None, *, proc: Path | None = None,
                 dev: Path | None = None, driver: Driver | None = None) -> GpuArgs:
    """Device nodes of the chosen GPUs plus the control nodes, the driver mounted read-only, and the environment
    that finds it. CUDA_VISIBLE_DEVICES names the UUIDs; NVIDIA_VISIBLE_DEVICES=void keeps a toolkit hook (if
    the engine has one) from adding GPUs of its own."""
    proc, dev = proc or PROC_GPUS, dev or DEV
    chosen = select_gpus(gpus, driver_gpus(proc))
    if not chosen:
        raise ServerError(f"the NVIDIA driver lists no GPU in {proc}")
    required = [dev / f"nvidia{g.minor}" for g in chosen] + [dev / n for n in REQUIRED_NODES]
    nodes = required + [dev / n for n in CONTROL_NODES if n not in REQUIRED_NODES and _is_char_device(dev / n)]
    missing = [str(p) for p in required if not _is_char_device(p)]
    if missing:
        raise ServerError(f"device node(s) {', '.join(missing)} missing (or not character devices)",
                          hint="load the NVIDIA driver's modules (nvidia, nvidia_uvm; `nvidia-modprobe -u -c=0` "
                               "makes the nodes), or choose server.docker_gpus.mode nvidia/cdi")
    found = driver or find_driver(driver_dir)
    env = {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in chosen),
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "LD_LIBRARY_PATH": ":".join(found.lib_dirs),
    }
    return GpuArgs(
        devices=[f"{p}:/dev/{p.name}:rwm" for p in nodes],
        mounts=[Mount(target=dst, source=src, type="bind", read_only=True) for src, dst in found.mounts],
        environment=env,
    )


def gpu_args(mode: str, gpus: list[str] | Literal["all"] | None, driver_dir: str | None = None) -> GpuArgs:
    """Dispatch on the mode; no GPU asked for: none, and NVIDIA_VISIBLE_DEVICES=void so that an image's own
    NVIDIA_VISIBLE_DEVICES=all cannot expose GPUs anyway."""
    if gpus is None:
        return GpuArgs(environment={"NVIDIA_VISIBLE_DEVICES": "void"})
    if mode == "nvidia":
        return nvidia_args(gpus)
    if mode == "cdi":
        return cdi_args(gpus)
    if mode == "devices":
        return devices_args(gpus, driver_dir)
    raise ServerError(f"unknown GPU mode {mode!r} (known: {', '.join(GPU_MODES)})")


def describe_mode(mode: str, driver_dir: str | None) -> str:
    """One line for `kit plan`: how the GPUs reach the container."""
    if mode == "cdi":
        return "cdi: the engine's CDI driver, devices nvidia.com/gpu=<UUID> of the gated GPUs (Docker 25+, Podman)"
    if mode == "devices":
        where = driver_dir or f"discovered ({', '.join(map(str, DRIVER_DIRS))}, else libcuda.so.1's folder)"
        return (f"devices: /dev/nvidia<minor> of the gated GPUs, /dev/{', /dev/'.join(CONTROL_NODES)} (when present); "
                f"driver {where} mounted read-only, LD_LIBRARY_PATH set to it; CUDA_VISIBLE_DEVICES=<UUIDs>")
    return "nvidia: a GPU DeviceRequest the NVIDIA Container Toolkit fulfils (docker run --gpus)"


# --------------------------------------------------------------------------- what the container sees

NVIDIA_SMI = ("nvidia-smi", f"{IN_CONTAINER}/bin/nvidia-smi")
SEEN_TIMEOUT_S = 30


class GpusSeen(TypedDict):
    """server.json's ``gpus_seen``: the GPUs nvidia-smi lists inside the container, against those asked for."""

    asked: list[str] | Literal["all"]
    seen: list[str] | None  # None: nvidia-smi could not be run in the container (then nothing is judged)
    ok: bool | None
    command: list[str] | None
    error: str | None


def smi_candidates(driver_dir: str | None) -> list[str]:
    """Where nvidia-smi is inside the container: on its PATH (the toolkit's /usr/bin), kit's driver folder."""
    extra = [f"{driver_dir}/bin/nvidia-smi"] if driver_dir else []
    return [*NVIDIA_SMI, *extra]


def gpus_seen(container: Any, asked: list[str] | Literal["all"], driver_dir: str | None) -> GpusSeen:
    """Run nvidia-smi in the started container and compare the UUIDs it lists with ``asked`` (UUIDs, or "all":
    then any non-empty list passes). Indices asked for cannot be compared and are not judged."""
    errors = []
    for smi in smi_candidates(driver_dir):
        cmd = [smi, "--query-gpu=uuid", "--format=csv,noheader"]
        try:
            code, out = container.exec_run(cmd, stdout=True, stderr=True, demux=False)
        except Exception as e:  # noqa: BLE001 - the engine's answer is evidence either way
            errors.append(f"{smi}: {type(e).__name__}: {e}")
            continue
        text = (out or b"")[:MAX_INFO_BYTES].decode(errors="replace")
        if code != 0:
            errors.append(f"{smi}: exit {code}: {' '.join(text.split())[:300]}")
            continue
        seen = [line.strip() for line in text.splitlines() if line.strip().startswith(("GPU-", "MIG-"))]
        if asked == "all":
            ok: bool | None = bool(seen)
        elif all(a.startswith(("GPU-", "MIG-")) for a in asked):
            ok = sorted(seen) == sorted(asked)
        else:
            ok = None
        return GpusSeen(asked=asked, seen=seen, ok=ok, command=cmd, error=None)
    return GpusSeen(asked=asked, seen=None, ok=None, command=None, error="; ".join(errors))
