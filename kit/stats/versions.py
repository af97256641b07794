"""Summaries as earlier summary schemas wrote them, from this kit's computation, so that `kit verify` can still
recompute a bundle an earlier kit made, byte for byte, instead of taking its summary on trust.

Each earlier schema is the current one less what was added since, provided the records hold nothing the earlier
schema would have judged differently. A schema kit cannot produce this way is not verifiable by this kit.
"""

from __future__ import annotations

import copy
from typing import Any

from kit.stats.metrics import SCHEMA_VERSION

#: What each schema added to the one before it (schema 3 to 2, 4 to 3).
_ADDED = {3: ("short_responses", "lengths", "length_test"), 4: ("usage_flagged", "usage", "usage_test"),
          5: ("comparison_method", "cell_statistic", "cell_statistic_trim", "slo", "goodput",
             "cell_values")}
#: The count (of a cell or an arm at a level) that must be zero for the schema before it to have said the same
#: (None: nothing in the records; schema 5's additions are the manifest's, and an earlier schema's summary is
#: recomputed with the analysis it had: ``kit.stats.summary.analysis_rule(legacy=True)``).
_UNSAID: dict[int, str | None] = {3: "short_responses", 4: "usage_flagged", 5: None}
#: Below this schema, a summary is recomputed with the legacy analysis (Welch's t on cell means).
LEGACY_BELOW = 5


def known_versions() -> range:
    return range(2, SCHEMA_VERSION + 1)


def as_schema(doc: dict[str, Any], version: int) -> dict[str, Any] | None:
    """``doc`` (a summary this kit computed) as summary schema ``version`` wrote it, or None when that schema
    cannot say what this kit says: schema 2 for records with a short response (it had no output-length
    guardrail, so its verdicts there were others), schema 3 (and 2) for records with a flagged usage count (no
    usage guardrail, and timing took the server's count)."""
    if version == SCHEMA_VERSION:
        return doc
    if version not in known_versions():
        return None
    out = copy.deepcopy(doc)
    for added in range(SCHEMA_VERSION, version, -1):
        unsaid = _UNSAID[added]
        if unsaid is not None and any(_counted(f, unsaid) for f in _figures(doc)):
            return None
        _drop(out, _ADDED[added])
    out["schema_version"] = version
    return out


def _figures(doc: dict[str, Any]) -> list[Any]:
    """Every arm's and every cell's figures at every level."""
    cells = [f for c in doc.get("cells") or [] if isinstance(c, dict)
             for f in (c.get("levels") or {}).values()]
    return [*(doc.get("arm_levels") or []), *cells]


def _counted(figures: Any, key: str) -> bool:
    return isinstance(figures, dict) and bool(figures.get(key))


def _drop(node: Any, keys: tuple[str, ...]) -> None:
    if isinstance(node, dict):
        for k in keys:
            node.pop(k, None)
        for v in node.values():
            _drop(v, keys)
    elif isinstance(node, list):
        for v in node:
            _drop(v, keys)
