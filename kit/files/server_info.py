"""``cells/<arm>-r<k>/server_info.json``: what the engine said of itself once ready (``server.info_path``;
sglang's ``/server_info``), with the few fields kit reads pulled out and the whole document kept."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from kit.files import JsonObject
from kit.files.base import BundleFile


class ServerInfoFile(BundleFile):
    file_pattern: ClassVar[str] = "cells/*/server_info.json"

    path: str = Field(description="The path asked (server.info_path).")
    fetched_at: str = Field(description="When it was asked (UTC, ISO 8601).")
    status: int | None = Field(description="The HTTP status, or null when the server could not be asked.")
    error: str | None = Field(None, description="Why there is no document (unreachable, not JSON, too large).")
    size_bytes: int = Field(0, description="The body's size as read (at most kit.runtime.server_info.MAX_BYTES).")
    version: str | None = Field(None, description="The engine's own version ('version': sglang.__version__).")
    max_total_num_tokens: int | None = Field(None, description="KV-cache capacity in tokens, as the engine sized it.")
    max_running_requests: int | None = Field(None, description="The largest decode batch the scheduler admits.")
    patch: JsonObject | None = Field(
        None, description="The kit OEA patch's marker ('kit_oea_patch': images/oea/PATCHED as the serving process "
        "read it), or null from an unpatched engine.")
    info: JsonObject | None = Field(None, description="The whole document, secrets redacted.")
