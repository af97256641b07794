"""The manifest's optional ``expert_pass`` section: distinct experts per MoE layer per decode step, read from the
engine's expert-distribution recorder (sglang's ``per_pass`` mode) in an untimed server per arm, after the timed
cells. Descriptive: shown beside the verdicts, never tested."""

from __future__ import annotations

from typing import Annotated, Self

from pydantic import Field, model_validator

from kit.manifest.fields import _Model

SGLANG_DUMP_ENV = "SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR"


class ExpertPass(_Model):
    """One extra, untimed server per arm (docs/oea.md, "Distinct experts per layer")."""

    server_args: list[Annotated[str, Field(max_length=4096)]] = Field(
        default_factory=lambda: ["--expert-distribution-recorder-mode", "per_pass"], max_length=64,
        description="Appended to every arm's command for this server only (the timed cells never get them: "
        "sglang captures the recorder's hooks into its decode CUDA graphs, so a server with the recorder on "
        "pays for it in every step, recording or not).")
    dump_env: str = Field(
        SGLANG_DUMP_ENV, pattern=r"^[A-Z_][A-Z0-9_]*$",
        description="The environment variable naming the folder the server dumps into; kit sets it to a folder "
        "of its own (mounted read-write into the container with the docker runtime).")
    top_k: Annotated[int, Field(ge=1, le=64)] = Field(
        description="Experts per token (the model's top-k): a pass's tokens are its count per layer / top_k.")
    requests: Annotated[int, Field(ge=1, le=1024)] = 64
    concurrency: Annotated[int, Field(ge=1, le=1024)] = Field(
        16, description="Requests in flight; passes of at most this many tokens are the decode steps.")
    prompt_tokens: Annotated[int, Field(ge=2, le=16384)] = Field(
        256, description="Words per prompt (at least one token each): more than concurrency, so that no "
        "prefill pass can pass for a decode step.")
    output_tokens: Annotated[int, Field(ge=2, le=4096)] = 64
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    request_timeout_s: float = Field(600.0, gt=0, le=3600)

    @model_validator(mode="after")
    def _prefill_apart(self) -> Self:
        if self.prompt_tokens <= self.concurrency:
            raise ValueError(f"expert_pass.prompt_tokens ({self.prompt_tokens}) must exceed expert_pass.concurrency "
                             f"({self.concurrency}): passes of at most concurrency tokens are counted as decode steps")
        return self
