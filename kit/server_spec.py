"""From a manifest and a cell to the ``ServerSpec`` a runtime starts: the command line with its
placeholders resolved, environment, GPUs, labels, mounts. The orchestrator runs it, ``kit compose``
writes it into a compose file; both import it from here.

``host_exposure`` is what `kit plan` shows of it: per arm, everything that touches the host (command,
image, mounts, IPC and network, published addresses, environment with pass_env as names only, GPUs,
privileges), computed from the same ``ServerSpec`` and the same container settings a run uses.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Literal, TypedDict

from kit.errors import ManifestError
from kit.manifest import Manifest
from kit.manifest.hostpaths import host_path_problem
from kit.manifest.models import LOADER_ENV
from kit.plan import Cell
from kit.plumbing.affinity import format_cpulist, parse_cpulist
from kit.plumbing.redact import PASSPHRASE_ENV, secrets_from_env
from kit.plumbing.tls import TlsClient
from kit.runtime import BASE_ENV_NAMES, BASE_ENV_PREFIXES, RankSpec, ServerSpec, secret_env_from
from kit.runtime.docker.config import container_config, ulimit_config
from kit.runtime.docker.gpus import describe_mode

ALL_INTERFACES = ("0.0.0.0", "::")


def substitute(args: list[str], values: dict[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders in every argument."""
    out = []
    for a in args:
        for k, v in values.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


def server_spec(m: Manifest, cell: Cell, run_id: str, log_path: Path, *, image: str | None = None,
                gpus: list[str] | None = None, nodes: Sequence[str] = ()) -> ServerSpec:
    """``nodes``: the allocation's hosts in order (runtime slurm; rank r runs on ``nodes[r]``)."""
    arm = m.arm(cell.arm)
    docker = m.runtime == "docker"
    slurm = m.runtime == "slurm"
    if slurm and len(nodes) != m.hardware.nodes:
        raise ManifestError(f"hardware.nodes is {m.hardware.nodes} but the allocation has {len(nodes)} node(s) "
                            f"({', '.join(nodes) or 'none'})",
                            hint="run it through kit submit, which allocates hardware.nodes nodes")
    cport = m.server.container_port or m.server.port
    # the process runtime starts the server in the cell's directory: a relative model.path is resolved from
    # kit's working directory, as the docker runtime resolves the directory it mounts
    model_path = m.model.mount_at if docker else ""
    if not docker and m.model.path:
        model_path = os.path.abspath(os.path.expanduser(m.model.path))
    values = {
        "host": "0.0.0.0" if docker else m.server.host,
        "port": str(cport if docker else m.server.port),
        "model_path": model_path,
        "served_name": m.model.served_name,
        "python": "python3" if docker else sys.executable,
        "node_rank": "0",
        "nnodes": str(len(nodes) if slurm else 1),
        "dist_init_addr": f"{nodes[0] if slurm else m.server.host}:{m.ranks.dist_init_port}",
    }
    argv = [*(arm.command or m.server.command), *arm.args]
    command = substitute(argv, values)
    ranks = tuple(RankSpec(r, host, substitute(argv, {**values, "node_rank": str(r)}))
                  for r, host in enumerate(nodes)) if slurm else ()
    labels = {"kit.run": run_id, "kit.experiment": m.name, "kit.arm": arm.name,
              "kit.repeat": str(cell.repeat), "kit.cell": cell.id}
    gpu_req: list[str] | Literal["all"] | None = None
    env = {**m.server.env, **arm.env}
    if docker and m.hardware.gpus:
        gpu_req = gpus if gpus else "all"
    elif m.hardware.gpus and gpus and not slurm:
        # the process runtime: the server sees exactly the GPUs the gate checked, in PCI order (the manifest
        # cannot override them: CUDA_* GPU variables are refused in its env)
        env = {**env, "CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
    elif not docker and not m.hardware.gpus:  # (ranks of runtime slurm: the GPUs Slurm gives each node's step)
        env = {**env, "CUDA_VISIBLE_DEVICES": ""}  # no GPU asked for: none visible (as docker's "void")
    return ServerSpec(
        name=f"kit-{m.name}-{run_id}-{cell.id}"[:120],
        arm=arm.name,
        command=command,
        env=env,
        secret_env=secret_env_from(m.server.pass_env),
        host=m.server.host,
        port=m.server.port,
        readiness_path=m.server.readiness_path,
        ready_timeout_s=m.server.ready_timeout_s,
        stop_grace_s=m.server.stop_grace_s,
        log_path=log_path,
        labels=labels,
        image=image,
        container_port=cport,
        gpus=gpu_req,
        shm_size=m.server.shm_size,
        ipc_host=m.server.ipc_host,
        model_mount=(resolved_mount_source(m.model.path), m.model.mount_at) if docker and m.model.path else None,
        cpus=m.server.cpus,
        ranks=ranks,
        gpu_mode=m.server.docker_gpus.mode,
        driver_dir=m.server.docker_gpus.driver_dir,
        extra={} if m.server.docker_gpus.ulimits else {"ulimits": False},
        tls=tls_client(m),
        log_limit_bytes=m.server.log_limit_mb << 20,
    )


def register_secrets(m: Manifest) -> None:
    """Every secret of a run known to redaction (kit.plumbing.redact) before anything starts: the values of
    server.pass_env and load.request.header_env set in kit's environment, and the runner key's passphrase."""
    secrets_from_env([*m.server.pass_env, PASSPHRASE_ENV])
    secrets_from_env(m.load.request.header_env.values(), headers=True)


def tls_client(m: Manifest) -> TlsClient | None:
    """server.scheme https: how every connection of kit's verifies the server (None: http)."""
    if m.server.scheme == "http":
        return None
    req = m.load.request
    return TlsClient(ca_file=req.ca_bundle.resolved() if req.ca_bundle else None, verify=req.verify_tls)


# --------------------------------------------------------------------------- what `kit plan` shows


class ImageView(TypedDict):
    context: str
    dockerfile: str
    base: str | None
    base_arm: str | None
    build_args: dict[str, str]


class MountView(TypedDict):
    source: str
    target: str
    mode: str  # "ro" or "rw"


class PublishedView(TypedDict):
    host: str
    port: int
    container_port: int | None  # None: the process runtime listens on the host itself


class RankView(TypedDict):
    rank: int
    node: str
    command: list[str]


class ArmExposure(TypedDict):
    """Everything one arm's server touches on the host (`kit plan --json`, under "host")."""

    arm: str
    runtime: str
    warnings: list[str]
    command: list[str]
    image: ImageView | None
    mounts: list[MountView]
    ipc: str
    shm_size: str | None
    network: str
    published: list[PublishedView]
    env: dict[str, str]
    inherited_env: list[str]  # names taken from your environment when set (process runtime)
    pass_env: list[str]  # names only: the values are secrets
    gpus: str
    cpus: str  # server.cpus, or "any"
    privileges: dict[str, str | bool | dict[str, int]]
    ranks: list[RankView]  # runtime slurm: one per node (NODE0 = the allocation's first node), else none



def _gpu_text(m: Manifest) -> str:
    n = m.hardware.gpus
    if not n:
        return ("none (NVIDIA_VISIBLE_DEVICES=void)" if m.runtime == "docker"
                else "none (CUDA_VISIBLE_DEVICES is set empty)")
    name = f" {m.hardware.gpu_name}" if m.hardware.gpu_name else ""
    cc = m.hardware.compute_capability
    gate = f" of compute capability {' or '.join(cc)}" if cc else ""
    if m.runtime == "docker":
        g = m.server.docker_gpus
        return f"{n}{name} GPU(s){gate} that pass the GPU gate, passed as {describe_mode(g.mode, g.driver_dir)}"
    return (f"{n}{name} GPU(s){gate} that pass the GPU gate; CUDA_VISIBLE_DEVICES (CUDA_DEVICE_ORDER=PCI_BUS_ID) is "
            "set to exactly their UUIDs")


def cpu_overlap(m: Manifest) -> str:
    """The CPUs server.cpus and load.cpus both name (as a CPU list), or ''."""
    if not (m.server.cpus and m.load.cpus):
        return ""
    return format_cpulist(parse_cpulist(m.server.cpus) & parse_cpulist(m.load.cpus))


def _warnings(m: Manifest, spec: ServerSpec, env: dict[str, str]) -> list[str]:
    out = [f"{k}={env[k]!r} in env changes what code the server loads" for k in sorted(LOADER_ENV & set(env))]
    out += [f"{k} is passed through from your environment and changes what code the server loads"
            for k in sorted(LOADER_ENV & set(m.server.pass_env))]
    if spec.ipc_host:
        out.append("ipc_host: the server shares the host's IPC namespace and /dev/shm")
    if spec.host in ALL_INTERFACES:
        out.append(f"port {spec.port} is reachable from other machines (bound to {spec.host}, all interfaces)")
    shared = cpu_overlap(m)
    if shared:
        out.append(f"server.cpus and load.cpus share CPU(s) {shared}: the load client competes with the server")
    if m.runtime == "process":
        out.append("process runtime: the server runs as you, with your files, network and IPC (no isolation)")
    if m.runtime == "slurm" and m.ranks.container == "none":
        out.append(f"runtime slurm: each of the {m.hardware.nodes} ranks runs as you on its node of the allocation, "
                   "with your files, network and IPC (no isolation)")
    return out


def plan_nodes(m: Manifest) -> list[str]:
    """Stand-ins for the allocation's nodes where there is no allocation yet (`kit plan`)."""
    return [f"NODE{i}" for i in range(m.hardware.nodes)] if m.runtime == "slurm" else []


def arm_exposure(m: Manifest, arm: str) -> ArmExposure:
    """Everything one arm's server touches on the host, from the same spec and container settings a run uses."""
    spec = server_spec(m, Cell(0, arm, 1), "plan", Path(os.devnull), nodes=plan_nodes(m))
    a = m.arm(arm)
    if m.runtime != "docker" or a.image is None:
        env = {**spec.env, "PYTHONUNBUFFERED": "1"}
        return ArmExposure(
            arm=arm, runtime=m.runtime, warnings=_warnings(m, spec, env), command=list(spec.command), image=None,
            mounts=[], ipc="host (a process on this machine)", shm_size=None,
            network="host (a process on this machine)",
            published=[PublishedView(host=spec.host, port=spec.port, container_port=None)],
            env=env, inherited_env=[*BASE_ENV_NAMES, *(f"{p}*" for p in BASE_ENV_PREFIXES)],
            pass_env=list(m.server.pass_env), gpus=_gpu_text(m), cpus=m.server.cpus or "any",
            privileges={"user": "you (the user running kit)", "privileged": False, "cwd": os.getcwd()},
            ranks=[RankView(rank=r.rank, node=r.host, command=list(r.command)) for r in spec.ranks],
        )
    gpus: Literal["all"] | None = "all" if m.hardware.gpus else None
    # the devices mode reads this host's driver when a cell starts: the plan shows the rest, and says how in "gpus"
    shown = None if spec.gpu_mode == "devices" else gpus
    cfg = container_config(replace(spec, image="(built per run)", gpus=shown, secret_env={}))
    env = dict(cfg.get("environment", {}))
    if gpus and spec.gpu_mode == "nvidia":
        env["NVIDIA_VISIBLE_DEVICES"] = "<UUIDs of the gated GPUs>"
    elif gpus and spec.gpu_mode == "devices":
        env["CUDA_VISIBLE_DEVICES"] = "<UUIDs of the gated GPUs>"
    ulimits = {str(u["Name"]): int(u["Soft"]) for u in ulimit_config(spec.extra, gpus)}  # as with the GPUs
    return ArmExposure(
        arm=arm, runtime=m.runtime, warnings=_warnings(m, spec, env), command=list(spec.command),
        image=ImageView(context=a.image.context, dockerfile=a.image.dockerfile, base=a.image.base,
                        base_arm=a.image.base_arm, build_args=dict(a.image.build_args)),
        mounts=[MountView(source=str(mt["Source"]), target=str(mt["Target"]), mode="ro" if mt.get("ReadOnly") else "rw")
                for mt in cfg.get("mounts", [])],
        ipc="host" if cfg.get("ipc_mode") == "host" else "private", shm_size=cfg.get("shm_size"),
        network="bridge (Docker's default)",
        published=[PublishedView(host=h, port=p, container_port=int(c.split("/")[0]))
                   for c, (h, p) in cfg.get("ports", {}).items()],
        env=env, inherited_env=[], pass_env=list(m.server.pass_env), gpus=_gpu_text(m),
        cpus=m.server.cpus or "any",
        privileges={"user": "the image's USER (root unless the image sets one)", "privileged": False,
                    "capabilities": "Docker's default set (none added)", "init": True, "ulimits": ulimits},
        ranks=[],
    )


def host_exposure(m: Manifest) -> list[ArmExposure]:
    """``arm_exposure`` for every arm, in manifest order."""
    return [arm_exposure(m, a.name) for a in m.arms]


def exposure_lines(view: ArmExposure) -> list[str]:
    """One arm's exposure as `kit plan` prints it (warnings first, marked with !)."""
    out = [f"  arm {view['arm']} ({view['runtime']}):", *(f"    ! {w}" for w in view["warnings"])]
    out += [f"    rank {r['rank']} on {r['node']}: {shlex.join(r['command'])}" for r in view["ranks"]] or [
        f"    command: {shlex.join(view['command'])}"]
    image = view["image"]
    if image is not None:
        base = image["base"] or f"image of arm {image['base_arm']}"
        args = " ".join(f"{k}={v}" for k, v in image["build_args"].items())
        out.append(f"    image: {image['context']} FROM {base} (built with {image['dockerfile']}"
                   + (f", build args {args})" if args else ")"))
    out += [f"    mount: {mt['source']} -> {mt['target']} ({mt['mode']})" for mt in view["mounts"]]
    shm = f", shm_size {view['shm_size']}" if view["shm_size"] else ""
    out.append(f"    ipc: {view['ipc']}{shm}; network: {view['network']}")
    for p in view["published"]:
        inside = f" -> container port {p['container_port']}" if p["container_port"] else " (listens here)"
        out.append(f"    published: {p['host']}:{p['port']}{inside}")
    shown = [f"{k}={v if v.startswith('<') and v.endswith('>') else shlex.quote(v)}" for k, v in view["env"].items()]
    out.append("    env: " + (" ".join(shown) or "(none)"))
    if view["inherited_env"]:
        out.append("    from your environment (when set): " + " ".join(view["inherited_env"]))
    out.append("    pass_env (names only; values come from your environment, redacted in every file): "
               + (" ".join(view["pass_env"]) or "(none)"))
    out.append(f"    gpus: {view['gpus']}")
    out.append(f"    cpus: {view['cpus']}")
    out.append("    privileges: " + "; ".join(f"{k} {v}" for k, v in view["privileges"].items()))
    return out


def resolved_mount_source(path: str) -> str:
    """The model directory as Docker will mount it, resolved now (each cell, just before its container is
    created) and checked again: a path that was safe when the manifest was validated but has since become a
    symlink to the runner key, the Docker socket or a system directory is refused (exit 3), and the resolved
    path, not the manifest's string, is what gets mounted."""
    real = os.path.realpath(os.path.expanduser(path))
    problem = host_path_problem(real)
    if problem is not None:
        raise ManifestError(f"model.path: {path!r} now resolves to {real!r}: {problem}",
                            hint="point model.path at the model's own directory; something changed it since "
                                 "the manifest was checked")
    return real
