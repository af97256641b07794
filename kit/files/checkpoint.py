"""``checkpoints/<n>.dsse.json``: a DSSE envelope per checkpoint, signed by the runner as the run goes.

Its payload is an in-toto Statement v1 (``CheckpointStatement``) whose subjects are the files that are new or
changed since the previous checkpoint (sha256 and size), and whose predicate (``CheckpointPredicate``) chains it
to the one before (the sha256 of that checkpoint file's bytes), says what it closes (the start of the run, a
completed cell, a resume, the end) and which files went away (a failed attempt moved aside). Folding the chain
gives every file the runner vouched for so far; ``kit.bundle.checkpoints`` writes, verifies and folds it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from kit.files.envelope import EnvelopeFile

PAYLOAD_TYPE = "application/vnd.in-toto+json"
CHECKPOINT_PREDICATE = "https://kit.invalid/checkpoint/v1"
CHECKPOINT_KINDS = ("start", "cell", "resume", "end")
_HEX64 = r"^[0-9a-f]{64}$"


class Sha256(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sha256: str = Field(pattern=_HEX64)


class CheckpointSubject(BaseModel):
    """A file as it was when the checkpoint was signed (``annotations.size``: its byte count)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=4096)
    digest: Sha256
    annotations: dict[str, int] = Field(default_factory=dict)


class CheckpointSigner(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keyid: str
    public_key: str = Field(alias="publicKey")


class CheckpointPredicate(BaseModel):
    """What one checkpoint closes, and its link to the one before."""

    model_config = ConfigDict(extra="forbid")

    sequence: int = Field(ge=0)  # 0, 1, 2, ... ; the file is checkpoints/<sequence as 6 digits>.dsse.json
    previous: Sha256 | None  # the previous checkpoint file's sha256 (None for sequence 0)
    run_id: str
    kind: Literal["start", "cell", "redo", "resume", "end"]
    cell: str | None = None  # kind "cell": which cell completed; "redo": which cell's attempt was set aside
    status: str | None = None  # kind "cell": its status (ok, failed); kind "end": the run's
    at: str  # UTC time of signing
    removed: list[str] = Field(default_factory=list)  # files vouched for before that are no longer in the bundle
    run_json: str | None = None  # base64 of run.json when it is a subject: a resume restores the signed copy
    signer: CheckpointSigner


class CheckpointStatement(BaseModel):
    """The signed payload of a checkpoint envelope."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type_: Literal["https://in-toto.io/Statement/v1"] = Field(alias="_type")
    subject: list[CheckpointSubject]
    predicate_type: Literal["https://kit.invalid/checkpoint/v1"] = Field(alias="predicateType")
    predicate: CheckpointPredicate


def _payload_schema(schema: dict[str, Any]) -> None:
    """The payload's own schema, as JSON Schema's content keywords say it (bundle.schema.json holds the
    ``CheckpointStatement`` definition it names)."""
    schema["properties"]["payload"].update({"contentEncoding": "base64", "contentMediaType": PAYLOAD_TYPE,
                                            "contentSchema": {"$ref": "#/$defs/CheckpointStatement"}})


class CheckpointFile(EnvelopeFile):
    """``checkpoints/<n>.dsse.json``: a DSSE envelope whose payload (base64) is a ``CheckpointStatement``."""

    file_pattern: ClassVar[str] = "checkpoints/*.dsse.json"
    model_config = ConfigDict(extra="forbid", json_schema_extra=_payload_schema)
