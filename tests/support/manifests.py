"""One manifest builder for every tier: a dict in the manifest file's own shape, then YAML or a model.

``manifest_data`` starts from a small process-runtime experiment of the real engine (two arms, one
level) and merges the given sections into it (a mapping updates the section, anything else replaces
it, ``None`` is skipped). ``write_manifest`` writes it as a manifest file, ``manifest_yaml`` gives the
bytes, ``manifest_model`` validates it into ``kit.manifest.Manifest``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kit.manifest import Manifest

SCHEMA_COMMENT = "# yaml-language-server: $schema=../manifest.schema.json\n"
# A small engine: a few seconds per cell.
ENGINE_ARGS: tuple[str, ...] = ("--experts", "16", "--top-k", "4", "--layers", "2", "--hidden", "64",
                                "--expert-ffn", "128", "--vocab", "256")


def engine_command(python: str = "{python}", engine_args: Sequence[str] = ENGINE_ARGS) -> list[str]:
    """``python -m kit.engine`` with the manifest's placeholders for host, port and served name."""
    return [python, "-m", "kit.engine", "--host", "{host}", "--port", "{port}", "--served-name", "{served_name}",
            *engine_args]


def ab_arms(*, same: bool = False) -> list[dict[str, Any]]:
    """baseline and oea (k0=2), or two identical arms a1 and a2 (an A/A experiment)."""
    if same:
        return [{"name": "a1"}, {"name": "a2"}]
    return [{"name": "baseline"}, {"name": "oea", "args": ["--oea-k0", "2"]}]


def manifest_data(name: str = "tiny", *, runtime: str = "process", port: int = 18080,
                  command: Sequence[str] | None = None, served_name: str = "tiny-moe",
                  arms: Sequence[Mapping[str, Any]] | None = None, **sections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "manifest_version": 1,
        "name": name,
        "runtime": runtime,
        "model": {"served_name": served_name},
        "server": {"command": list(command) if command is not None else engine_command(), "port": port},
        "arms": [dict(a) for a in arms] if arms is not None else ab_arms(),
        "load": {"levels": [1]},
    }
    for key, value in sections.items():
        if value is None:
            continue
        if isinstance(value, Mapping) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = dict(value) if isinstance(value, Mapping) else value
    return data


class _NoAliases(yaml.SafeDumper):
    """Shared objects are written out again: manifests refuse YAML anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def manifest_yaml(data: Mapping[str, Any]) -> bytes:
    text = yaml.dump(dict(data), Dumper=_NoAliases, sort_keys=False, default_flow_style=None, width=120)
    return (SCHEMA_COMMENT + text).encode()


def write_manifest(path: Path, data: Mapping[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(manifest_yaml(data))
    return path


def manifest_model(data: Mapping[str, Any]) -> Manifest:
    return Manifest.model_validate(dict(data))
