"""The manifest's ``load`` section: the clients, their levels, prompts and budgets. Its own module so that
models.py stays under the size limit and the load's growth (workloads, arrivals) has a place."""

from __future__ import annotations

import itertools
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from kit.manifest.fields import CpuList, PositiveInt, _Model
from kit.manifest.workload import Dataset, RequestOptions


class Load(_Model):
    """The load: closed-loop streaming clients at fixed concurrency levels."""

    endpoint: Literal["chat", "completions"] = "chat"
    levels: list[PositiveInt] = Field(min_length=1, max_length=64, description="Concurrency levels, ascending.")
    requests_per_level: PositiveInt | list[PositiveInt] | None = Field(
        None,
        description="Recorded requests per level: one number for every level, or a list with one entry per "
        "level (default: max(5 x concurrency, 50)). Never fewer than the level's concurrency.",
    )
    warmup_requests: Annotated[int, Field(ge=0)] | None = Field(
        None, description="Unrecorded requests before each level (default: the level's concurrency)."
    )
    prompt_tokens: PositiveInt = Field(128, le=1_000_000)
    output_tokens: PositiveInt = Field(128, le=1_000_000)
    seed: int = 0
    request_timeout_s: float = Field(600.0, gt=0)
    processes: Annotated[int, Field(ge=1, le=256)] | Literal["auto"] = Field(
        "auto", description="Load processes per level; 'auto' spreads large levels over free cores."
    )
    cpus: CpuList | None = Field(
        None, description="CPUs the load processes run on, as a Linux CPU list ('8-15'); processes 'auto' then "
        "counts these. Default: the CPUs kit itself may use.",
    )
    dialect: Literal["sglang", "transformers"] = Field(
        "sglang",
        description="How each request asks for exactly output_tokens tokens and for usage. sglang (also vLLM and "
        "kit's engine): ignore_eos and stream_options.include_usage; transformers (`transformers serve`, which "
        "rejects ignore_eos): generation_config '{\"eos_token_id\": -1}'. Streams end at [DONE] or, without "
        "one, at the end of the body after a finish_reason.",
    )
    # -- workload (kit.manifest.workload): what each request carries and how it is sent --
    dataset: Dataset | None = Field(
        None, description="Where prompts come from (kit.workload builds every request before the level). None: the "
        "legacy prompts of prompt_tokens words from a 256-word list (not tokens).")
    tokenizer: str | None = Field(
        None, min_length=1, max_length=4096, description="How prompts are counted: a directory with the Hugging "
        "Face tokenizer (default: model.path), or 'words' (one token per whitespace-separated word: kit's engine).")
    request: RequestOptions = Field(default_factory=RequestOptions)

    @field_validator("levels")
    @classmethod
    def _ascending(cls, v: list[int]) -> list[int]:
        for a, b in itertools.pairwise(v):
            if b <= a:
                raise ValueError(f"levels must be strictly ascending without duplicates; {b} follows {a}")
        return v

    @model_validator(mode="after")
    def _budgets(self) -> Load:
        r = self.requests_per_level
        if isinstance(r, list) and len(r) != len(self.levels):
            raise ValueError(f"requests_per_level has {len(r)} entries but there are {len(self.levels)} levels")
        for level in self.levels:
            if self.requests_at(level) < level:
                raise ValueError(f"level {level} would get only {self.requests_at(level)} requests: fewer than its "
                                 "concurrency, so not every user would send one")
        return self

    def requests_at(self, level: int) -> int:
        r = self.requests_per_level
        if isinstance(r, list):
            return r[self.levels.index(level)]
        return r or max(5 * level, 50)

    def warmup_at(self, level: int) -> int:
        return level if self.warmup_requests is None else self.warmup_requests
