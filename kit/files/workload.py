"""``workload/level-<c>.jsonl``: the requests a level sends, built before it starts (``kit.workload``), one JSON
object a line in index order, and ``workload/index.json``: where they came from (datasets and their sha256, the
tokenizer and its file's sha256, the chat template's fixed overhead). Read back by the load driver (index i is the
i-th line: recorded requests first, then the warm-up's), so ``kit verify`` can hold what was intended against what
each record says was sent."""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field

from kit.files.base import BundleFile


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str
    content: str


class WorkItem(BaseModel):
    """One request's content: chat ``messages`` or a completion ``prompt``, its ``max_tokens``, and the prompt tokens
    the server should count (templated, by the workload's tokenizer), null when the tokenizer is unknown."""

    model_config = ConfigDict(extra="forbid")

    i: int = Field(ge=0)
    messages: list[Message] | None = None
    prompt: str | None = None
    max_tokens: int = Field(ge=1)
    prompt_tokens: int | None = Field(None, ge=0, description="Expected usage.prompt_tokens (chat: templated).")
    content_tokens: int | None = Field(None, ge=0, description="Tokens of the prompt text alone (no template).")
    group: str | None = Field(None, description="Shared-prefix group or multi-turn session id.")


class WorkItemLine(WorkItem):
    """A line of ``workload/level-<c>.jsonl`` (for bundle.schema.json)."""


class SourceFile(BaseModel):
    path: str
    sha256: str
    bytes: int


class WorkloadIndex(BundleFile):
    """``workload/index.json``."""

    file_pattern: ClassVar[str] = "workload/index.json"
    dataset: str = Field(description="The dataset kind (load.dataset.kind).")
    tokenizer: str = Field(description="'words' or the tokenizer's directory.")
    tokenizer_sha256: str | None = Field(None, description="sha256 of its tokenizer.json (null for 'words').")
    template_overhead: int | None = Field(
        None, description="Chat: tokens the chat template adds to one user message (measured once, for the report; "
        "every request's expected count is its own templated count).")
    sources: list[SourceFile] = Field(default_factory=list, description="Every data file read, with its sha256.")
    levels: dict[str, str] = Field(default_factory=dict, description="level -> sha256 of its workload file.")
