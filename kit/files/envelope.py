"""``provenance.dsse.json`` and ``manifest.yaml.sig``: DSSE envelopes (the shape only; whether a signature
verifies and whom it is trusted for is ``kit.signing``'s business, never this model's)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class EnvelopeSignature(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keyid: str = ""
    sig: str
    public_key: str | None = Field(None, alias="publicKey")


class EnvelopeFile(BaseModel):
    """A DSSE envelope: base64 payload (an in-toto Statement), its type, and one or more signatures."""

    model_config = ConfigDict(extra="forbid")

    payload_type: str = Field(alias="payloadType")
    payload: str
    signatures: list[EnvelopeSignature] = Field(min_length=1)


class ServerMetricsFile(BaseModel):
    """``cells/<id>/level-<c>/server_metrics.json``: the server's Prometheus samples before and after the
    level (``{"name{labels}": value}``), null where the server has no ``/metrics``."""

    model_config = ConfigDict(extra="forbid")

    before: dict[str, float] | None
    after: dict[str, float] | None
