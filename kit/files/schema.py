"""``bundle.schema.json``: one JSON Schema with a definition per bundle file, generated from the models.

The generator takes a registry ``{file pattern: model}``; every room that adds a bundle file adds its
model to ``REGISTRY`` (or passes a larger registry), and the checked-in file is compared with the
generated one by a test, like ``manifest.schema.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from kit.files import JsonObject
from kit.files.cell import CellFile
from kit.files.images import ImagesFile
from kit.files.plan import PlanFile
from kit.files.run import RunFile
from kit.files.server import ServerFile

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "https://kit.invalid/bundle.schema.json"

REGISTRY: dict[str, type[BaseModel]] = {
    RunFile.file_pattern: RunFile,
    PlanFile.file_pattern: PlanFile,
    ImagesFile.file_pattern: ImagesFile,
    CellFile.file_pattern: CellFile,
    ServerFile.file_pattern: ServerFile,
}


def bundle_schema(registry: Mapping[str, type[BaseModel]] = REGISTRY) -> JsonObject:
    """The schema: ``$defs`` holds one definition per model, ``x-kit-files`` maps each file pattern (a
    glob relative to the bundle root) to the definition its files validate against."""
    patterns = sorted(registry)
    refs, top = models_json_schema([(registry[p], "validation") for p in patterns],
                                   ref_template="#/$defs/{model}")
    files = {p: refs[(registry[p], "validation")]["$ref"] for p in patterns}
    return {
        "$schema": SCHEMA_DIALECT,
        "$id": SCHEMA_ID,
        "title": "kit result bundle files",
        "description": "The typed files of a kit result bundle, one definition per file; x-kit-files says which "
                       "files each definition describes. Generated from kit.files by `kit schema --bundle`; do "
                       "not edit by hand.",
        "x-kit-files": files,
        "anyOf": [{"$ref": files[p]} for p in patterns],
        "$defs": top.get("$defs", {}),
    }


def bundle_schema_text(registry: Mapping[str, type[BaseModel]] = REGISTRY) -> str:
    return json.dumps(bundle_schema(registry), indent=2, sort_keys=False, ensure_ascii=False) + "\n"
