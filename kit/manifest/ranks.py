"""The manifest's ``ranks`` section: how an arm's server runs as one rank per node of a Slurm allocation
(``runtime: slurm``), e.g. sglang with ``--nnodes {nnodes} --node-rank {node_rank} --dist-init-addr
{dist_init_addr}``. Its own module so that models.py stays under the size limit."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kit.safeyaml import excerpt

if TYPE_CHECKING:
    from kit.manifest.models import Manifest

MOUNT_RE = re.compile(r"^/[^:,\s]*:/[^:,\s]*(?::(?:ro|rw))?$")


class Ranks(BaseModel):
    """One rank per node: rank 0 on the allocation's first node (where kit runs, serves the HTTP API and
    listens on ``dist_init_port`` for the others), rank r on node r, each started as its own job step."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    container: Literal["none", "pyxis"] = Field(
        "none", description="How each rank runs: 'none', the command as a process on the node (its own job step), "
        "or 'pyxis', inside container_image through the cluster's pyxis/enroot plugin (srun --container-image).",
    )
    container_image: Annotated[str, Field(min_length=1, max_length=1024)] | None = Field(
        None, description="With container 'pyxis': the enroot image (a squashfs path on shared storage, or a "
        "docker:// URI the cluster can pull), passed as srun --container-image.",
    )
    container_mounts: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=list, description="With container 'pyxis': SRC:DST[:ro|rw] mounts (srun --container-mounts); "
        "model.path is mounted at the same path read-only unless listed.",
    )
    dist_init_port: Annotated[int, Field(ge=1, le=65535)] = Field(
        29500, description="Port of rank 0 on the first node that the other ranks connect to: {dist_init_addr} is "
        "FIRST_NODE:dist_init_port. Gated free on that node before every start, like server.port.",
    )

    @field_validator("container_mounts")
    @classmethod
    def _mounts(cls, v: list[str]) -> list[str]:
        bad = [m for m in v if not MOUNT_RE.match(m)]
        if bad:
            raise ValueError(f"{excerpt(bad)}: each mount is /SRC:/DST or /SRC:/DST:ro (absolute paths, "
                             "no commas or spaces)")
        return v


def check_ranks(m: Manifest) -> None:
    """hardware.nodes, runtime and ranks agree (raises ValueError, which pydantic reports): more than one node
    needs runtime slurm, whose ranks run as processes or pyxis containers (never kit-built images), and rank
    0's rendezvous port is its own."""
    if m.hardware.nodes > 1 and m.runtime != "slurm":
        raise ValueError(f"hardware.nodes is {m.hardware.nodes} but runtime is {m.runtime}: a server on several nodes "
                         "needs runtime: slurm (one rank per node, started by kit inside the allocation)")
    r = m.ranks
    if m.runtime == "slurm":
        with_image = [a.name for a in m.arms if a.image is not None]
        if with_image:
            raise ValueError(f"arm(s) {', '.join(with_image)}: runtime slurm starts no kit-built image; use "
                             "ranks.container: pyxis with ranks.container_image, or runtime docker on one node")
        if m.server.cpus is not None:
            raise ValueError("server.cpus pins a server kit starts here; the ranks of runtime slurm run where Slurm "
                             "puts them: leave server.cpus out; ask Slurm (kit submit --slurm-opt=--cpus-per-task=N)")
        if r.dist_init_port in (m.server.port, *m.server.extra_ports, *m.gates.ports):
            raise ValueError(f"ranks.dist_init_port {r.dist_init_port} is also server.port, server.extra_ports or "
                             "gates.ports: give rank 0's rendezvous its own port")
    if r.container == "pyxis" and r.container_image is None:
        raise ValueError("ranks.container is pyxis but ranks.container_image is not set")
    if r.container != "pyxis" and (r.container_image is not None or r.container_mounts):
        raise ValueError("ranks.container_image and ranks.container_mounts need ranks.container: pyxis")
