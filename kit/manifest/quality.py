"""The manifest's optional ``quality`` section: an untimed few-shot accuracy check per cell (GSM8K-style), run on
the cell's own server after readiness and before the timed levels, reported beside the speed verdict."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from kit.manifest.fields import _Model


class Quality(_Model):
    """A few-shot exact-answer check through the same endpoint the load uses (docs/oea.md, "Quality")."""

    dataset: str = Field(
        min_length=1, max_length=4096,
        description="JSONL file of {question, answer} items, the answer ending in '#### N' (GSM8K's format), on "
        "the machine kit runs on; a relative path is taken from the directory kit runs in. Its sha256 is recorded.",
    )
    shots: Annotated[int, Field(ge=0, le=16)] = Field(5, description="The first items, as worked examples.")
    questions: Annotated[int, Field(ge=1, le=2000)] = Field(200, description="The items after the shots asked.")
    concurrency: Annotated[int, Field(ge=1, le=256)] = Field(
        16, description="Questions in flight at once (OEA routes a batch: at 1 it is plain top-k0).")
    max_tokens: Annotated[int, Field(ge=16, le=4096)] = 512
    request_timeout_s: float = Field(600.0, gt=0, le=3600)
