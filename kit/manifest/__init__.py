"""The experiment manifest: pydantic models (``models``), strict loading of exact bytes and schema
generation (``loading``). Every public name is importable from ``kit.manifest``."""

from kit.manifest.analysis import Analysis
from kit.manifest.design import Design
from kit.manifest.fields import ENV_NAME_RE, IMAGE_REF_RE, PINNED_RE, Env, EnvName, Port, PositiveInt
from kit.manifest.hardware import Hardware
from kit.manifest.load import Load
from kit.manifest.loading import (
    LoadedManifest,
    is_placeholder_digest,
    json_schema,
    load_manifest,
    project_root,
    read_bytes,
    schema_text,
)
from kit.manifest.models import (
    SCHEMA_DIALECT,
    SCHEMA_FILE,
    SCHEMA_ID,
    Arm,
    Gates,
    ImageSpec,
    Manifest,
    ModelSpec,
    Server,
)
from kit.manifest.names import NAME_RE, Name
from kit.manifest.runnable import check_runnable, on_this_host, refuse_placeholders

__all__ = [
    "ENV_NAME_RE",
    "IMAGE_REF_RE",
    "NAME_RE",
    "PINNED_RE",
    "SCHEMA_DIALECT",
    "SCHEMA_FILE",
    "SCHEMA_ID",
    "Analysis",
    "Arm",
    "Design",
    "Env",
    "EnvName",
    "Gates",
    "Hardware",
    "ImageSpec",
    "Load",
    "LoadedManifest",
    "Manifest",
    "ModelSpec",
    "Name",
    "Port",
    "PositiveInt",
    "Server",
    "check_runnable",
    "is_placeholder_digest",
    "json_schema",
    "load_manifest",
    "on_this_host",
    "project_root",
    "read_bytes",
    "refuse_placeholders",
    "schema_text",
]
