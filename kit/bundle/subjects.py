"""Signed file sizes in provenance subjects, so that an archive's members can be bounded before they are read.

An in-toto ResourceDescriptor has no size field; kit records each file's byte count as the annotation
``size`` (``{"name", "digest": {"sha256"}, "annotations": {"size": N}}``). ``add_sizes`` rewrites a
statement made by ``kit.signing.statement`` (same deterministic JSON layout) before it is signed;
``subject_sizes`` reads them back from a verified statement. A statement without sizes stays valid:
extraction then bounds each member by what is left of the archive's total size limit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kit.plumbing.jsontypes import loads

SIZE_KEY = "size"


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
