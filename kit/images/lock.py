"""`kit lock`: pin each arm's base image by the registry's digest, editing the manifest in place."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from docker.errors import APIError

from kit import safeyaml
from kit.errors import ImageBuildError
from kit.images.identity import is_placeholder
from kit.manifest import load_manifest, read_bytes
from kit.runtime.docker import connect, explanation

# --------------------------------------------------------------------------- kit lock


@dataclass(frozen=True)
class LockChange:
    arm: str
    line: int
    old: str
    new: str

    def __str__(self) -> str:
        return f"arm {self.arm} (line {self.line}): {self.old} -> {self.new}"


def split_reference(ref: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of ``repo[:tag][@sha256:...]``."""
    name, _, digest = ref.partition("@")
    repo, tag = name, None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repo, _, tag = name.rpartition(":")
    return repo, tag, digest or None


def lock_manifest(path: Path, *, client: Any | None = None, update: bool = False) -> list[LockChange]:
    """Pin every tagged base to the digest the registry serves now, rewriting only those lines.

    Bases that are unpinned or carry the all-zeros placeholder are resolved; with ``update``, pinned
    tags are resolved again too. Comments and formatting are kept byte for byte. The manifest's
    signature no longer matches afterwards: sign it again. Fails with ImageBuildError (exit 6) when
    the engine cannot reach the registry.
    """
    raw = read_bytes(path)
    lm = load_manifest(path, raw, allow_unpinned=True)
    doc = safeyaml.load(raw)
    lines = raw.decode("utf-8").splitlines(keepends=True)
    changes: list[LockChange] = []
    for idx, arm in enumerate(lm.manifest.arms):
        ref = arm.image.base if arm.image else None
        if ref is None or ref.startswith("sha256:"):
            continue
        repo, tag, digest = split_reference(ref)
        if digest is not None and not is_placeholder(ref) and not update:
            continue
        if tag is None and digest is not None:
            continue  # pinned without a tag: nothing to resolve
        name = f"{repo}:{tag or 'latest'}"
        client = connect(client, error=ImageBuildError)
        new = f"{name}@{_registry_digest(client, name)}"
        if new == ref:
            continue
        line = _replace_on_line(lines, doc.line_of(("arms", idx, "image", "base")), ref, new, path)
        changes.append(LockChange(arm.name, line, ref, new))
    if changes:
        text = "".join(lines)
        load_manifest(path, text.encode(), allow_unpinned=False)
        tmp = path.with_name(f".{path.name}.lock-tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return changes


def _registry_digest(client: Any, name: str) -> str:
    try:
        data = client.images.get_registry_data(name)
    except (APIError, requests.RequestException) as e:
        raise ImageBuildError(
            f"cannot resolve {name} from its registry: {explanation(e)}",
            hint="`kit lock` needs a Docker engine that reaches the registry; run it where one does, "
            "or pin a local image by its ID (sha256:...) instead",
        ) from None
    digest = str(data.id)
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ImageBuildError(f"the registry answered {digest!r} for {name}, not a sha256 digest")
    return digest


def _replace_on_line(lines: list[str], line: int | None, old: str, new: str, path: Path) -> int:
    start = (line or 1) - 1
    for i in range(start, min(start + 3, len(lines))):
        if lines[i].count(old) == 1:
            lines[i] = lines[i].replace(old, new)
            return i + 1
    raise ImageBuildError(f"{path}: cannot find {old!r} on line {line} to rewrite it",
                          hint="edit the base by hand, then sign the manifest again")
