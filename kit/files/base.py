"""The base of every typed bundle file: a ``schema_version`` and kit's JSON layout of a model.

Files carry evidence kit does not interpret (inspect output, host facts), so models allow extra fields
unless they say otherwise; a reader fails only on what it needs and cannot read.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, ConfigDict

from kit.files import JsonObject

SCHEMA_VERSION = 1


class Loose(BaseModel):
    """A part of a bundle file that may carry more fields than kit reads."""

    model_config = ConfigDict(extra="allow")


class BundleFile(Loose):
    """A whole bundle file. ``to_json`` writes the fields that were given or set (so a file keeps the
    layout it had when it was read) and always ``schema_version``."""

    file_pattern: ClassVar[str] = ""
    schema_version: int = SCHEMA_VERSION

    def to_json(self) -> JsonObject:
        data: JsonObject = self.model_dump(mode="json", exclude_unset=True)
        data["schema_version"] = self.schema_version
        return data
