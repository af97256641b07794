"""``bundle.schema.json``: one JSON Schema with a definition per bundle file, generated from the models.

The generator takes a registry ``{file pattern: model}``; every room that adds a bundle file adds its
model to ``REGISTRY`` (or passes a larger registry), and the checked-in file is compared with the
generated one by a test, like ``manifest.schema.json``.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from pathlib import Path

import jsonschema
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from kit.files import JsonObject
from kit.files.cell import CellFile
from kit.files.checkpoint import CheckpointFile, CheckpointStatement
from kit.files.client import ClientReport
from kit.files.envelope import EnvelopeFile, ServerMetricsFile
from kit.files.environment import EnvironmentFile
from kit.files.expert_pass import ExpertPassFile
from kit.files.gates import GatesLine
from kit.files.images import ImagesFile
from kit.files.looks import LookFile
from kit.files.plan import PlanFile
from kit.files.quality import QualityFile
from kit.files.records import RecordLine
from kit.files.reproduce import ReproduceFile
from kit.files.reproduce_looks import ReproduceLookFile
from kit.files.run import RunFile
from kit.files.server import ServerFile
from kit.files.server_info import ServerInfoFile
from kit.files.summary import Summary
from kit.files.telemetry import TelemetryFile, TelemetrySample
from kit.files.workload import WorkItemLine, WorkloadIndex
from kit.plumbing.jsontypes import loads

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_ID = "https://kit.invalid/bundle.schema.json"

REGISTRY: dict[str, type[BaseModel]] = {
    RunFile.file_pattern: RunFile,
    PlanFile.file_pattern: PlanFile,
    ImagesFile.file_pattern: ImagesFile,
    CellFile.file_pattern: CellFile,
    ServerFile.file_pattern: ServerFile,
    ServerInfoFile.file_pattern: ServerInfoFile,
    QualityFile.file_pattern: QualityFile,
    ExpertPassFile.file_pattern: ExpertPassFile,
    "environment.json": EnvironmentFile,
    "environment.resume-*.json": EnvironmentFile,
    "gates.jsonl": GatesLine,
    "*/gates.jsonl": GatesLine,  # cells/<id>/ and failed/<id>-a<n>/ (fnmatch's * also matches /)
    "*/level-*/records.jsonl": RecordLine,
    "*/level-*/client.json": ClientReport,
    "summary.json": Summary,
    "*/level-*/server_metrics.json": ServerMetricsFile,
    TelemetryFile.file_pattern: TelemetryFile,
    "*/level-*/telemetry.jsonl": TelemetrySample,
    "provenance.dsse.json": EnvelopeFile,
    "manifest.yaml.sig": EnvelopeFile,
    ReproduceFile.file_pattern: ReproduceFile,
    WorkloadIndex.file_pattern: WorkloadIndex,
    "workload/level-*.jsonl": WorkItemLine,
    LookFile.file_pattern: LookFile,
    ReproduceLookFile.file_pattern: ReproduceLookFile,  # kit reproduce --until-decided
    CheckpointFile.file_pattern: CheckpointFile,  # the payload: CheckpointStatement (EXTRA_DEFS)
    # kit reproduce: the source bundle's files the verdict and the setup diff were read from (kit.reproduce.sealing)
    "source/provenance.dsse.json": EnvelopeFile,
    "source/summary.json": Summary,
    "source/run.json": RunFile,
    "source/plan.json": PlanFile,
    "source/environment.json": EnvironmentFile,
    "source/images.json": ImagesFile,
}


# definitions of what a bundle file holds inside it (a signed payload), not of a file
EXTRA_DEFS: tuple[type[BaseModel], ...] = (CheckpointStatement,)


def bundle_schema(registry: Mapping[str, type[BaseModel]] = REGISTRY) -> JsonObject:
    """The schema: ``$defs`` holds one definition per model, ``x-kit-files`` maps each file pattern (a
    glob relative to the bundle root) to the definition its files validate against."""
    patterns = sorted(registry)
    refs, top = models_json_schema([(registry[p], "validation") for p in patterns]
                                   + [(m, "validation") for m in EXTRA_DEFS], ref_template="#/$defs/{model}")
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


def validate_bundle_files(root: Path, schema: JsonObject | None = None) -> list[str]:
    """Check every file of the bundle at ``root`` that a pattern of ``x-kit-files`` names against its
    definition (a ``.jsonl`` file line by line); returns the files checked. ``jsonschema.ValidationError``
    names the first file that does not validate."""
    full = schema if schema is not None else bundle_schema()
    files = full["x-kit-files"]
    assert isinstance(files, dict)
    checked = []
    cls = jsonschema.validators.validator_for(full)
    cls.check_schema(full)  # once: jsonschema.validate checks the whole schema again on every call
    validators: dict[str, jsonschema.protocols.Validator] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        for pattern, ref in files.items():
            if not fnmatch.fnmatchcase(rel, pattern):
                continue
            if ref not in validators:
                validators[ref] = cls({**full, "anyOf": [{"$ref": ref}]})
            text = path.read_text()
            lines = rel.endswith(".jsonl")
            docs = [loads(x) for x in text.splitlines() if x.strip()] if lines else [loads(text)]
            for doc in docs:
                try:
                    if (error := jsonschema.exceptions.best_match(validators[ref].iter_errors(doc))) is not None:
                        raise error
                except jsonschema.ValidationError as e:
                    e.message = f"{rel}: {e.message}"
                    raise
            checked.append(rel)
    return checked
