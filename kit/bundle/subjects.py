"""Signed file sizes in provenance subjects, so that an archive's members can be bounded before they are read.

An in-toto ResourceDescriptor has no size field; kit records each file's byte count as the annotation
``size`` (``{"name", "digest": {"sha256"}, "annotations": {"size": N}}``). ``add_sizes`` rewrites a
statement made by ``kit.signing.statement`` (same deterministic JSON layout) before it is signed;
``subject_sizes`` reads them back from a verified statement. A statement without sizes stays valid:
extraction then bounds each member by what is left of the archive's total size limit.

``file_problems`` and ``hash_signed`` hold a bundle's files against its signed subjects (`kit verify`, `kit report`,
resume, `kit archive`): a file whose size differs from its signed one is refused by its size, before a byte of it
is hashed (a replaced 8 GiB file costs a ``stat``, not minutes of hashing), and the others are hashed no further
than one byte past their signed size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from kit.plumbing.files import sha256_file
from kit.plumbing.jsontypes import loads

SIZE_KEY = "size"


class Signed(NamedTuple):
    """A sealed bundle's verified envelope (``kit.bundle.verify.signed_parts``) and the files beside it."""

    env: dict[str, Any]
    body: bytes
    subjects: dict[str, str]  # {path: sha256}
    on_disk: set[str]
    sizes: dict[str, int]     # {path: bytes} of the subjects whose size was signed


def add_sizes(body: bytes, sizes: Mapping[str, int]) -> bytes:
    """``body`` (an in-toto Statement) with ``annotations.size`` on every subject named in ``sizes``."""
    stmt = loads(body)
    for s in stmt["subject"]:
        if s["name"] in sizes:
            s.setdefault("annotations", {})[SIZE_KEY] = int(sizes[s["name"]])
    return json.dumps(stmt, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def subject_sizes(stmt: Mapping[str, Any]) -> dict[str, int]:
    """``{name: size}`` of the subjects that carry a size; ValueError for a malformed one."""
    out: dict[str, int] = {}
    subjects = stmt.get("subject")
    for s in subjects if isinstance(subjects, list) else []:
        notes = s.get("annotations") if isinstance(s, dict) else None
        if not isinstance(notes, dict) or SIZE_KEY not in notes:
            continue
        size = notes[SIZE_KEY]
        if type(size) is not int or size < 0:
            raise ValueError(f"subject {s.get('name')!r} has a malformed size {size!r}")
        out[str(s.get("name"))] = size
    return out


def hash_signed(root: Path, on_disk: Sequence[str], subjects: Mapping[str, str], sizes: Mapping[str, int]
                ) -> tuple[dict[str, str], dict[str, str], int]:
    """``({path: sha256}, {path: why}, bytes hashed)`` of the files ``on_disk`` that ``subjects`` name: one whose size
    is not its signed one (``sizes``; a statement without sizes: none known) has no digest, and a note saying so."""
    digests: dict[str, str] = {}
    refused: dict[str, str] = {}
    nbytes = 0
    for rel in on_disk:
        if rel not in subjects:
            continue
        want = sizes.get(rel)
        if want is not None and (have := os.lstat(root / rel).st_size) != want:
            refused[rel] = f" ({have} bytes, not the {want} signed: refused by its size, not hashed)"
            continue
        digests[rel], n = sha256_file(root / rel, want)
        nbytes += n
    return digests, refused, nbytes


def file_problems(on_disk: Sequence[str], subjects: Mapping[str, str], digests: Mapping[str, str],
                  notes: Mapping[str, str] | None = None) -> list[str]:
    """The files ``on_disk`` (``digests``: the sha256 of those the subjects name) against the signed subjects: an
    extra file, a changed one (with its ``notes``), a missing one (`kit archive` hashes as it writes, then asks the
    same)."""
    notes = notes or {}
    problems = [f"extra file not in provenance: {rel}" for rel in on_disk if rel not in subjects]
    problems += [f"{rel}: sha256 differs from the signed provenance{notes.get(rel, '')}" for rel in on_disk
                 if rel in subjects and digests.get(rel) != subjects[rel]]
    present = set(on_disk)
    return problems + [f"missing file: {rel}" for rel in sorted(subjects) if rel not in present]
