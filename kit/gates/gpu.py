"""The GPU gate: every GPU the manifest uses is present, identified, not in MIG mode, and clean.

Clean means NVML v2 'used' memory at or below ``gates.gpu_memory_threshold_mib`` and no compute process,
on every GPU, at the same poll. The gate polls every 10 ms until clean or ``gates.gpu_deadline_s``:
the driver frees a dead process's memory within milliseconds of its exit, so there is nothing to
wait for once the holders are gone, and no fixed sleep could prove that they are.
"""

from __future__ import annotations

import time
from typing import Literal

from typing_extensions import TypedDict

from kit.gates import behind, procinfo
from kit.gates.procinfo import ContainerRef
from kit.gates.reserve import holder
from kit.gates.result import Check, GpuIdentity, Timer
from kit.manifest import Manifest
from kit.nvml import MIB, GpuProbe, MemoryMib, NoDriverError, NvmlError, UnsupportedError
from kit.plumbing.poll import poll_until
from kit.runtime.records import RunOwner, owner_text

NAME = "gpu"
POLL_S = 0.010
NO_GPU_HINT = (
    "run on a machine whose NVIDIA GPUs and driver `nvidia-smi` lists, or set hardware.gpus: 0 "
    "for an experiment that needs no GPU"
)


class GpuHolder(TypedDict, total=False):
    """A compute process on a GPU: NVML's pid and memory, then what ``procinfo.describe`` says of it."""

    pid: int
    used_mib: int | None
    visible: bool
    name: str | None
    cmdline: str | None
    user: str | None
    pgid: int | None
    container: ContainerRef | None


class GpuSample(GpuIdentity, MemoryMib):
    """One GPU at one poll: which GPU, its memory, whether it is clean and who holds it."""

    clean: bool
    processes: list[GpuHolder]


class MigState(TypedDict):
    index: int
    current: int
    pending: int


class CapabilityReading(TypedDict):
    """One GPU's CUDA compute capability ('major.minor'), or null with NVML's reason."""

    index: int
    compute_capability: str | None
    reason: str | None


class GpuEvidence(TypedDict, total=False):
    needs: int | Literal["all"]
    threshold_mib: int
    deadline_s: float
    driver: None  # present (null) when no driver was found
    reason: str
    driver_version: str
    available: int
    selection: str
    identified: list[GpuIdentity]
    mig: list[MigState]
    compute_capability: list[CapabilityReading]
    gpus: list[GpuSample]
    polls: int
    clean_after_s: float
    waited_s: float
    reserved: dict[str, RunOwner]
    of_live_runs: dict[str, RunOwner]  # GPU process pid -> the live run (of another kit) it serves


def _reserved(indices: list[int]) -> dict[str, RunOwner]:
    """Of these GPUs (and ``all``: a run holding every GPU), those another live kit run holds, with its owner."""
    return {n: o for n in ("all", *map(str, indices)) if (o := holder("gpu", n)) is not None}


def _needs(wanted: int | Literal["all"]) -> str:
    if wanted == "all":
        return "all GPUs (hardware.gpus: all)"
    return f"{wanted} GPU{'s' if wanted != 1 else ''} (hardware.gpus: {wanted})"


def _size(mib: int) -> str:
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{mib} MiB"


def _label(gpu: GpuIdentity) -> str:
    return f"GPU {gpu['index']} ({gpu['uuid'][:12]}…)"


def check_gpus(m: Manifest, probe: GpuProbe) -> tuple[Check, list[GpuIdentity]]:
    """Run the GPU gate; return the check and the GPUs it identified ({index, uuid, name})."""
    timer = Timer()
    wanted: int | Literal["all"] = m.hardware.gpus or "all"  # 0 only arrives here when the caller forces it
    evidence = GpuEvidence(needs=wanted, threshold_mib=m.gates.gpu_memory_threshold_mib,
                           deadline_s=m.gates.gpu_deadline_s)
    try:
        probe.init()
    except NoDriverError as e:
        evidence.update({"driver": None, "reason": e.reason})
        msg = f"no NVIDIA driver found ({e.reason}); the manifest needs {_needs(wanted)}"
        return timer.check(NAME, False, msg, NO_GPU_HINT, evidence), []
    except NvmlError as e:
        evidence.update({"reason": e.reason})
        return timer.check(NAME, False, f"NVML did not start: {e.reason}", NO_GPU_HINT, evidence), []
    try:
        return _check(timer, m, probe, wanted, evidence)
    except NvmlError as e:
        evidence.update({"reason": e.reason})
        return timer.check(NAME, False, f"NVML failed while checking GPUs: {e.reason}",
                           "check the GPUs with nvidia-smi (a GPU may have fallen off the bus)", evidence), []
    finally:
        probe.shutdown()


def _check(
    timer: Timer, m: Manifest, probe: GpuProbe, wanted: int | Literal["all"], evidence: GpuEvidence
) -> tuple[Check, list[GpuIdentity]]:
    count = probe.device_count()
    evidence.update({"driver_version": probe.driver_version(), "available": count})
    if count == 0 or (wanted != "all" and count < wanted):
        found = "no NVIDIA GPU found" if count == 0 else f"only {count} NVIDIA GPU(s) found"
        msg = f"{found} (driver {evidence['driver_version']}); the manifest needs {_needs(wanted)}"
        return timer.check(NAME, False, msg, NO_GPU_HINT, evidence), []
    chosen = m.hardware.gpu_selection()
    if chosen is not None and max(chosen) >= count:
        msg = (f"hardware.gpu_indices {chosen} names GPU {max(chosen)}, but this host has {count} NVIDIA GPU(s) "
               f"(indices 0-{count - 1}, driver {evidence['driver_version']})")
        return timer.check(NAME, False, msg, "list indices this host has (nvidia-smi -L)", evidence), []
    indices = chosen if chosen is not None else list(range(count if wanted == "all" else wanted))
    evidence["selection"] = (
        f"GPUs {chosen} of {count} (hardware.gpu_indices)" if chosen is not None
        else f"all {count} GPUs" if len(indices) == count else f"the first {len(indices)} of {count} GPUs by index"
    )
    gpus = [GpuIdentity(index=i, uuid=probe.uuid(i), name=probe.name(i)) for i in indices]
    problems = _identity_problems(m, probe, gpus, evidence)
    if problems:
        hint = ("use a machine with the GPUs the manifest names, or change hardware.gpu_name / "
                "hardware.compute_capability (and the kernel backends pinned for that GPU family)")
        if evidence.get("mig"):
            hint += "; turn MIG off with `nvidia-smi -i INDEX -mig 0` (takes effect after a GPU reset)"
        return timer.check(NAME, False, "; ".join(problems), hint, evidence), gpus
    if held := _reserved(indices):  # another live run's GPUs (kit.gates.reserve): refused at once, naming it
        evidence["reserved"] = held
        msg = "; ".join(f"{'all GPUs are' if n == 'all' else f'GPU {n} is'} reserved by {owner_text(o)}, which is "
                        "still running" for n, o in held.items())
        return timer.check(NAME, False, msg, "wait for that run to finish, or give this manifest GPUs no live run "
                           "holds (hardware.gpu_indices); `kit clean` leaves a live run alone", evidence), gpus
    clean, samples, polls, elapsed = _poll(probe, gpus, m.gates.gpu_memory_threshold_mib, m.gates.gpu_deadline_s)
    evidence.update({"gpus": samples, "polls": polls})
    if clean:
        evidence["clean_after_s"] = round(elapsed, 6)
        return timer.check(NAME, True, _clean_message(samples, evidence, polls, elapsed), None, evidence), gpus
    evidence["waited_s"] = round(elapsed, 6)
    return _dirty(timer, samples, evidence, polls), gpus


def _identity_problems(
    m: Manifest, probe: GpuProbe, gpus: list[GpuIdentity], evidence: GpuEvidence
) -> list[str]:
    problems = []
    for gpu in gpus:
        if m.hardware.gpu_name is not None and gpu["name"] != m.hardware.gpu_name:
            problems.append(f"{_label(gpu)} is a {gpu['name']!r}; the manifest needs {m.hardware.gpu_name!r}")
        problems += _capability_problems(m, probe, gpu, evidence)
        try:
            current, pending = probe.mig_mode(gpu["index"])
        except UnsupportedError:
            continue
        if current:
            evidence.setdefault("mig", []).append(MigState(index=gpu["index"], current=current, pending=pending))
            problems.append(f"{_label(gpu)} is in MIG mode; kit needs whole GPUs")
    evidence["identified"] = gpus
    return problems


def _capability_problems(m: Manifest, probe: GpuProbe, gpu: GpuIdentity, evidence: GpuEvidence) -> list[str]:
    """hardware.compute_capability: the GPU must report one of the listed CUDA compute capabilities."""
    wanted = m.hardware.compute_capability
    if wanted is None:
        return []
    readings = evidence.setdefault("compute_capability", [])
    try:
        major, minor = probe.compute_capability(gpu["index"])
    except UnsupportedError as e:
        readings.append(CapabilityReading(index=gpu["index"], compute_capability=None, reason=e.reason))
        return [f"{_label(gpu)}: NVML cannot tell its compute capability ({e.reason}); the manifest needs "
                f"{' or '.join(wanted)} (hardware.compute_capability)"]
    found = f"{major}.{minor}"
    readings.append(CapabilityReading(index=gpu["index"], compute_capability=found, reason=None))
    if found in wanted:
        return []
    return [f"{_label(gpu)} ({gpu['name']}) has compute capability {found}; the manifest is for "
            f"{' or '.join(wanted)} (hardware.compute_capability): its pinned kernel paths would not be the "
            "ones measured there"]


def _sample(probe: GpuProbe, gpu: GpuIdentity, threshold_mib: int) -> GpuSample:
    mem = probe.memory(gpu["index"])
    procs = probe.processes(gpu["index"])
    return GpuSample(
        **gpu,
        **mem.as_mib(),
        clean=mem.used // MIB <= threshold_mib and not procs,
        processes=[GpuHolder(pid=p.pid, used_mib=None if p.used_bytes is None else p.used_bytes // MIB)
                   for p in procs],
    )


def _poll(
    probe: GpuProbe, gpus: list[GpuIdentity], threshold_mib: int, deadline_s: float
) -> tuple[bool, list[GpuSample], int, float]:
    """Poll every POLL_S until every GPU is clean at the same poll (all GPUs are sampled at each one) or
    the deadline passes."""
    first = time.monotonic()
    samples: list[GpuSample] = []
    polls = 0

    def all_clean() -> bool:
        nonlocal samples, polls
        samples = [_sample(probe, g, threshold_mib) for g in gpus]
        polls += 1
        return all(s["clean"] for s in samples)

    clean = poll_until(all_clean, deadline_s, interval=POLL_S)
    return clean, samples, polls, time.monotonic() - first


def _clean_message(samples: list[GpuSample], evidence: GpuEvidence, polls: int, elapsed: float) -> str:
    per_gpu = ", ".join(
        f"{_label(s)} {s['used_mib']} MiB used"
        + (f" (v1 says {s['v1_used_mib']} MiB)" if s["memory_info_version"] == 2 else " (v1 only)")
        for s in samples
    )
    return (f"{evidence['selection']} clean (≤ {evidence['threshold_mib']} MiB used, no compute process): "
            f"{per_gpu}; clean {elapsed:.3f} s after the first poll ({polls} poll{'s' if polls != 1 else ''})")


def _dirty(timer: Timer, samples: list[GpuSample], evidence: GpuEvidence, polls: int) -> Check:
    parts: list[str] = []
    every: list[procinfo.ProcInfo] = []
    dirty = [s for s in samples if not s["clean"]]
    each = [[procinfo.describe(p["pid"]) for p in s["processes"]] for s in dirty]
    flat = [info for described in each for info in described]
    theirs = behind.live_servers(flat)
    if theirs:
        evidence["of_live_runs"] = {str(pid): o for pid, o in theirs.items()}
    for s, described in zip(dirty, each, strict=True):
        for p, info in zip(s["processes"], described, strict=True):
            p.update({"visible": info["visible"], "name": info["name"], "cmdline": info["cmdline"],
                      "user": info["user"], "pgid": info["pgid"], "container": info["container"]})
        holders = [p for p in described if p["pid"] not in theirs]
        every += holders
        used = f"{_size(s['used_mib'])} used"
        if described:
            n = len(described)
            who = ", ".join(procinfo.short(p) + (f" [{p['cmdline']}]" if p.get("cmdline") else "")
                            + (f" (a server of {owner_text(theirs[p['pid']])}, still running)" if p["pid"] in theirs
                               else "") for p in described)
            fix = procinfo.fix_text(holders) if holders else "wait for that run to finish, or use other GPUs"
            parts.append(f"{_label(s)}: {used} by {n} process{'es' if n != 1 else ''}: {who}; fix: {fix}")
        else:
            parts.append(f"{_label(s)}: {used} (over {evidence['threshold_mib']} MiB) but NVML lists no process "
                         "(it may run in another PID namespace or container); fix: kit clean, or find it with "
                         "nvidia-smi on the host")
    msg = f"GPUs not clean after {evidence['waited_s']:.1f} s ({polls} polls): " + "; ".join(parts)
    if theirs and not every:
        hint = ("wait for that run to finish, or give this manifest GPUs no live run uses (hardware.gpu_indices); "
                "`kit clean` leaves a live run alone")
    else:
        hint = procinfo.fix_text(every) + (" (the servers of live runs named above are theirs: wait for them)"
                                           if theirs else "")
    return timer.check(NAME, False, msg, hint, evidence)
