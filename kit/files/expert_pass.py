"""``experts/<arm>/expert_distribution.json``: the distinct experts per MoE layer per decode step of one arm, from
the engine's expert-distribution recorder in an untimed server (manifest ``expert_pass``). Descriptive."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import BaseModel, Field

from kit.errors import BundleError
from kit.files.base import BundleFile
from kit.files.read import read_file

MAX_RAW_PASSES = 2048  # decode passes kept raw (per layer distinct counts); the statistics use all of them


class LayerDistinct(BaseModel):
    layer: int = Field(description="The recorder's layer index (layers that never routed a token are left out).")
    mean: float
    p50: float
    p90: float
    max: int


class BatchDistinct(BaseModel):
    batch: int = Field(description="Tokens in the decode step (its count per layer / top_k).")
    passes: int
    mean: float = Field(description="Distinct experts per layer, averaged over the layers and the passes.")


class RawPass(BaseModel):
    forward_pass_id: int
    batch: int
    distinct: list[int] = Field(description="Per layer (in the order of 'layers'): experts with a non-zero count.")


class ExpertPassFile(BundleFile):
    file_pattern: ClassVar[str] = "experts/*/expert_distribution.json"

    arm: str
    status: str = Field(description="'ok', or 'failed' with 'error' saying where it stopped.")
    error: str | None = None
    requests: int
    concurrency: int
    prompt_tokens: int
    output_tokens: int
    top_k: int
    seed: int
    server_args: list[str] = Field(description="What the arm's command gained for this server only.")
    answered: int = Field(0, description="Requests that got a complete answer.")
    dump_file: str | None = Field(None, description="The dump read (rank 0's), as the server named it.")
    dump_sha256: str | None = None
    dump_bytes: int | None = None
    passes: int = Field(0, description="Forward passes the recorder kept.")
    decode_passes: int = Field(0, description="Passes of 1..concurrency tokens: the decode steps.")
    prefill_passes: int = Field(0, description="Passes of more tokens: prefills.")
    experts: int | None = Field(None, description="Logical experts per layer.")
    layers: list[LayerDistinct] = Field(default_factory=list)
    by_batch: list[BatchDistinct] = Field(default_factory=list)
    mean_distinct: float | None = Field(None, description="Over every MoE layer of every decode step.")
    raw: list[RawPass] = Field(default_factory=list, description=f"The first {MAX_RAW_PASSES} decode passes.")
    raw_truncated: bool = False
    wall_s: float | None = None


def expert_pass_problems(root: Path) -> list[str]:
    """``kit verify``: every ``experts/*/expert_distribution.json`` of the bundle at ``root`` read as its model
    (what bundle.schema.json is generated from); its hash is checked with the other files."""
    problems = []
    for path in sorted(root.glob("experts/*/expert_distribution.json")):
        rel = path.relative_to(root).as_posix()
        try:
            read_file(root, rel, ExpertPassFile)
        except BundleError as e:
            problems.append(e.message)
    return problems
