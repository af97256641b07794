"""The manifest's ``hardware`` section: what an experiment needs from the machine, and from a batch system
(kit submit) the nodes to allocate. Its own module so that models.py stays under the size limit."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from kit.safeyaml import excerpt

ComputeCapability = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]?\.[0-9]$")]


class Hardware(BaseModel):
    """What the experiment needs from the machine."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    gpus: Annotated[int, Field(ge=0, le=1024)] | Literal["all"] = Field(
        0, description="Number of GPUs the server uses, or 'all'. 0 means no GPU (no GPU gate)."
    )
    gpu_name: str | None = Field(
        None, max_length=256, description="If set, every GPU used must report this NVML name (e.g. 'NVIDIA H200')."
    )
    # --- compute capability (helper sglang): the GPU family a manifest's kernel paths are pinned for
    compute_capability: list[ComputeCapability] | None = Field(
        None, min_length=1, max_length=16,
        description="If set, every GPU used must report one of these CUDA compute capabilities (NVML's "
        "'major.minor', e.g. ['12.0'] for RTX PRO 6000 Blackwell, ['10.0'] for B200, ['9.0'] for H100/H200): a "
        "manifest whose backends are pinned for one GPU family refuses to run on another (an NVFP4 experiment "
        "where NVFP4 is emulated).",
    )
    # --- end compute capability
    nodes: int = Field(
        1, ge=1, le=1024, description="Nodes a batch system (kit submit) allocates for the run; more than 1 needs "
        "runtime: slurm (one server rank per node)."
    )
    gpus_per_node: Annotated[int, Field(ge=0, le=1024)] | None = Field(
        None, description="GPUs kit submit asks for on each node (sbatch --gpus-per-node); default: 'gpus' when it "
        "is a number, none when it is 'all' (an exclusive node has them all)."
    )
    # --- disjoint GPUs for runs that share a host (issue 21) ---
    gpu_indices: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, min_length=1, max_length=1024,
        description="Which GPUs (NVML indices) the run uses, e.g. [2, 3], so that two experiments share a host on "
        "disjoint GPUs; hardware.gpus must be their count. The GPU gate checks exactly these, the run reserves exactly "
        "these, and the server is given exactly these (CUDA_VISIBLE_DEVICES, or docker's GPU list). Default: the "
        "first hardware.gpus.",
    )

    @model_validator(mode="after")
    def _indices_match_the_count(self) -> Hardware:
        if self.gpu_indices is None:
            return self
        if len(set(self.gpu_indices)) != len(self.gpu_indices):
            raise ValueError(f"gpu_indices {excerpt(self.gpu_indices)} names a GPU twice: list each index once")
        if self.gpus != len(self.gpu_indices):
            raise ValueError(f"gpu_indices lists {len(self.gpu_indices)} GPU(s) but gpus is {self.gpus!r}: set "
                             f"gpus: {len(self.gpu_indices)}")
        return self

    def gpu_selection(self) -> list[int] | None:
        """The NVML indices the run uses when the manifest names them (None: the first ``gpus``, or all)."""
        return list(self.gpu_indices) if self.gpu_indices is not None else None
