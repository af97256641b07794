"""From a manifest and a cell to the ``ServerSpec`` a runtime starts: the command line with its
placeholders resolved, environment, GPUs, labels, mounts. The orchestrator runs it, ``kit compose``
writes it into a compose file; both import it from here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from kit.manifest import Manifest
from kit.plan import Cell
from kit.runtime import ServerSpec, secret_env_from


def substitute(args: list[str], values: dict[str, str]) -> list[str]:
    """Replace ``{name}`` placeholders in every argument."""
    out = []
    for a in args:
        for k, v in values.items():
            a = a.replace("{" + k + "}", v)
        out.append(a)
    return out


def server_spec(m: Manifest, cell: Cell, run_id: str, log_path: Path, *, image: str | None = None,
                gpus: list[str] | None = None) -> ServerSpec:
    arm = m.arm(cell.arm)
    docker = m.runtime == "docker"
    cport = m.server.container_port or m.server.port
    model_path = (m.model.mount_at if docker else m.model.path) or ""
    values = {
        "host": "0.0.0.0" if docker else m.server.host,
        "port": str(cport if docker else m.server.port),
        "model_path": model_path,
        "served_name": m.model.served_name,
        "python": "python3" if docker else sys.executable,
    }
    command = substitute([*(arm.command or m.server.command), *arm.args], values)
    labels = {"kit.run": run_id, "kit.experiment": m.name, "kit.arm": arm.name,
              "kit.repeat": str(cell.repeat), "kit.cell": cell.id}
    gpu_req: list[str] | Literal["all"] | None = None
    env = {**m.server.env, **arm.env}
    if docker and m.hardware.gpus:
        gpu_req = gpus if gpus else "all"
    elif m.hardware.gpus and gpus:
        # the process runtime: the server sees exactly the GPUs the gate checked, in PCI order
        env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": ",".join(gpus), **env}
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
        model_mount=(m.model.path, m.model.mount_at) if docker and m.model.path else None,
    )
