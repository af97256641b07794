"""Summaries as earlier summary schemas wrote them, from this kit's computation, so that `kit verify` can still
recompute a bundle an earlier kit made, byte for byte, instead of taking its summary on trust.

Each earlier schema is the current one less what was added since, provided the records hold nothing the earlier
schema would have judged differently. A schema kit cannot produce this way is not verifiable by this kit.
"""

from __future__ import annotations

import copy
from typing import Any

from kit.stats.metrics import SCHEMA_VERSION

#: Schema 3 added the short-response counts and the output-length guardrail to schema 2.
_ADDED_IN_3 = ("short_responses", "lengths", "length_test")


def known_versions() -> range:
    return range(2, SCHEMA_VERSION + 1)


def as_schema(doc: dict[str, Any], version: int) -> dict[str, Any] | None:
    """``doc`` (a summary this kit computed) as summary schema ``version`` wrote it, or None when that schema
    cannot say what this kit says: schema 2 for records with a short response (it had no output-length
    guardrail, so its verdicts there were others)."""
    if version == SCHEMA_VERSION:
        return doc
    if version != 2:
        return None
    if any(_short(a) for a in doc.get("arm_levels") or []):
        return None
    out = copy.deepcopy(doc)
    out["schema_version"] = 2
    _drop(out, _ADDED_IN_3)
    return out


def _short(arm_level: Any) -> bool:
    return isinstance(arm_level, dict) and bool(arm_level.get("short_responses"))


def _drop(node: Any, keys: tuple[str, ...]) -> None:
    if isinstance(node, dict):
        for k in keys:
            node.pop(k, None)
        for v in node.values():
            _drop(v, keys)
    elif isinstance(node, list):
        for v in node:
            _drop(v, keys)
