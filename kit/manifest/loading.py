"""Loading a manifest: safe YAML of the exact bytes, JSON Schema then model validation, schema generation.

A manifest is untrusted input until verified. ``load_manifest`` parses the exact bytes that the
signature covers (see ``kit.signing``), validates them against the JSON Schema generated from the
models (for precise paths) and then against the models themselves (for cross-field rules), and
reports every problem with the field path and the line it is on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
from pydantic import ValidationError

from kit import safeyaml
from kit.errors import ManifestError, UsageError
from kit.manifest.models import SCHEMA_DIALECT, SCHEMA_FILE, SCHEMA_ID, Manifest
from kit.plumbing.files import TooLarge, read_bounded
from kit.safeyaml import MAX_QUOTE, clip, excerpt

# --------------------------------------------------------------------------- schema


def json_schema() -> dict[str, Any]:
    """The manifest's JSON Schema, generated from the models."""
    schema = Manifest.model_json_schema()
    out: dict[str, Any] = {"$schema": SCHEMA_DIALECT, "$id": SCHEMA_ID}
    out.update(schema)
    out["description"] = (
        "A kit experiment: two or more arms of an LLM server compared under the same load. "
        "Generated from kit.manifest by `kit schema`; do not edit by hand."
    )
    return out


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=False, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class LoadedManifest:
    """A validated manifest with the exact bytes it was parsed from. ``path`` names it in every message; ``origin``,
    where set, is the file whose project holds its images/ (a resumed run's manifest is the bundle's copy, its
    project the one the run started from)."""

    path: Path
    raw: bytes
    manifest: Manifest
    origin: Path | None = None

    @property
    def project_root(self) -> Path:
        return project_root(self.origin or self.path)


def project_root(manifest_path: Path) -> Path:
    """The nearest ancestor of the manifest that holds an images/ directory (else its directory)."""
    start = manifest_path.resolve().parent
    for d in (start, *start.parents):
        if (d / "images").is_dir():
            return d
    return start


def read_bytes(path: Path) -> bytes:
    """The manifest's exact bytes, reading at most the size limit + 1 byte (``/dev/zero`` fails at once).

    A missing file is a usage error (exit 2, the same in every command: the path given does not exist);
    a directory, FIFO, device or unreadable file (``/proc/self/mem``) and an oversized file are invalid
    manifests (exit 3)."""
    try:
        return read_bounded(path, safeyaml.MAX_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file", hint="give the path of a manifest (.yaml)") from None
    except IsADirectoryError:
        raise ManifestError(f"{path}: is a directory, not a manifest file",
                            hint=f"give a manifest file, e.g. {path}/NAME.yaml") from None
    except PermissionError:
        raise ManifestError(f"{path}: permission denied",
                            hint="make it readable for you (chmod u+r), or copy it somewhere you can read") from None
    except TooLarge:
        raise ManifestError(
            f"{path}: file is {_size(path)} bytes; manifests are limited to {safeyaml.MAX_BYTES} bytes",
            hint="a manifest describes an experiment; data belongs elsewhere",
        ) from None
    except OSError as e:
        why = e.strerror or str(e).removeprefix(f"{path}: ")
        raise ManifestError(f"{path}: cannot be read as a manifest file ({why})",
                            hint="give a regular YAML file") from None


def _size(path: Path) -> str:
    try:
        return str(path.stat().st_size)
    except OSError:
        return f"more than {safeyaml.MAX_BYTES}"


def load_manifest(path: Path, raw: bytes | None = None, *, allow_unpinned: bool = False) -> LoadedManifest:
    """Parse and validate ``raw`` (read from ``path`` if not given); raise ManifestError listing problems."""
    if raw is None:
        raw = read_bytes(path)
    try:
        doc = safeyaml.load(raw)
    except safeyaml.YamlError as e:
        where = f"{path}: line {e.line}" if e.line else str(path)
        raise ManifestError(f"{where}: {e.message}", hint=e.hint) from None
    if not isinstance(doc.data, dict):
        raise ManifestError(f"{path}: line 1: the top level must be a mapping of fields (name, runtime, arms, ...)")
    problems = _schema_problems(doc)
    if not problems:
        try:
            manifest = Manifest.model_validate(doc.data)
        except ValidationError as e:
            problems = _pydantic_problems(e, doc)
        else:
            unpinned = manifest.unpinned_bases()
            if unpinned and not allow_unpinned:
                arm, base = unpinned[0]
                idx = next(i for i, a in enumerate(manifest.arms) if a.name == arm)
                line = doc.line_of(("arms", idx, "image", "base"))
                raise ManifestError(
                    f"{path}: line {line}: arms[{idx}].image.base: {excerpt(base)} is not pinned by digest",
                    hint="pin it as name:tag@sha256:<digest> (`kit lock` resolves it when a registry is "
                    "reachable), or pass --allow-unpinned, which is recorded in the bundle",
                )
            return LoadedManifest(path=path, raw=raw, manifest=manifest)
    shown = problems[:20]
    more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
    raise ManifestError(
        f"{path}: {len(problems)} problem(s):\n" + "\n".join(f"  {p}" for p in shown) + more,
        hint=f"see {SCHEMA_FILE} (`kit schema`) for every field",
    )


def is_placeholder_digest(ref: str) -> bool:
    """A digest no image has: 64 hex characters repeating a pattern of at most 16 (all zeros, deadbeef...)."""
    _, sep, digest = ref.rpartition("sha256:")
    return bool(sep) and len(digest) == 64 and any(digest == digest[:k] * (64 // k) for k in (1, 2, 4, 8, 16))


def _fmt_path(path: tuple[Any, ...]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{clip(p, 100)}" if out else clip(p, 100))
    return out or "(top level)"


_VALIDATOR: jsonschema.protocols.Validator | None = None


def _validator() -> jsonschema.protocols.Validator:
    global _VALIDATOR
    if _VALIDATOR is None:
        schema = json_schema()
        cls = jsonschema.validators.validator_for(schema)
        _VALIDATOR = cls(schema)
    return _VALIDATOR


def _schema_problems(doc: safeyaml.Document) -> list[str]:
    errors = sorted(_validator().iter_errors(doc.data), key=lambda e: [str(p) for p in e.absolute_path])
    out = []
    for err in errors:
        err = _deepest(err)
        path = tuple(err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = err.schema.get("properties", {}) if isinstance(err.schema, dict) else {}
            for extra in (k for k in err.instance if k not in known):
                line = doc.line_of((*path, extra))
                out.append(_clipped(
                    f"line {line}: {_fmt_path((*path, extra))}: unknown field {excerpt(extra)} "
                    f"(allowed here: {', '.join(sorted(known))})"
                ))
            continue
        line = doc.line_of(path)
        out.append(_clipped(f"line {line}: {_fmt_path(path)}: {_schema_message(err)}"))
    return list(dict.fromkeys(out))


# The size keywords: what they count (one, several) and which way they bound it; their messages say both numbers.
_SIZES = {"maxItems": ("item", "items", "many"), "minItems": ("item", "items", "few"),
          "maxLength": ("character", "characters", "many"), "minLength": ("character", "characters", "few"),
          "maxProperties": ("entry", "entries", "many"), "minProperties": ("entry", "entries", "few")}
MAX_PROBLEM_CHARS = 1000  # one problem's line, whatever a validator put in it (``_clipped``)


def _schema_message(err: jsonschema.ValidationError) -> str:
    """jsonschema's message, with the offending value quoted at most MAX_QUOTE characters long and a size keyword's
    limit stated (its own message is "[1, 1, ...] is too long", the whole value and no limit)."""
    inst = err.instance
    if err.validator in _SIZES and isinstance(inst, (str, list, dict)):
        one, several, too = _SIZES[str(err.validator)]
        bound = "at most" if too == "many" else "at least"
        return (f"{excerpt(inst, count=False)} has {len(inst)} {one if len(inst) == 1 else several}: too {too} "
                f"({bound} {err.validator_value})")
    whole = repr(inst)
    return err.message.replace(whole, excerpt(inst)) if len(whole) > MAX_QUOTE else err.message


def _clipped(problem: str) -> str:
    """A problem's line cut in the middle past MAX_PROBLEM_CHARS, keeping its start (where, what) and its end (the
    advice): a value quoted whole by a rule kit did not word would otherwise make a line of its size."""
    if len(problem) <= MAX_PROBLEM_CHARS:
        return problem
    half = MAX_PROBLEM_CHARS // 2
    return f"{problem[:half]} … ({len(problem) - 2 * half} characters left out) … {problem[-half:]}"


def _deepest(err: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """For anyOf/oneOf (e.g. 'X or null'), report the branch that got furthest, not 'is not null'."""
    while err.context:
        branches = [e for e in err.context if not (e.validator == "type" and e.validator_value == "null")]
        if not branches:
            break
        err = max(branches, key=lambda e: (len(list(e.absolute_path)), e.validator != "type"))
    return err


def _pydantic_problems(e: ValidationError, doc: safeyaml.Document) -> list[str]:
    out = []
    for err in e.errors():
        path = tuple(p for p in err["loc"] if isinstance(p, (str, int)))
        line = doc.line_of(path)
        msg = err["msg"].removeprefix("Value error, ")
        out.append(_clipped(f"line {line}: {_fmt_path(path)}: {msg}"))
    return out
