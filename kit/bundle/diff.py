"""Where two JSON values differ: the first key path, for `kit verify`'s messages (summary.json against the one
recomputed from the records)."""

from __future__ import annotations

import json
from typing import Any


def first_difference(stored: Any, fresh: Any, path: str = "") -> str | None:
    """The first key path (sorted keys, list indexes) where two JSON values differ, or None."""
    if isinstance(stored, dict) and isinstance(fresh, dict):
        for k in sorted(set(stored) | set(fresh)):
            p = f"{path}.{k}" if path else str(k)
            if k not in fresh:
                return f"{p} (only in summary.json)"
            if k not in stored:
                return f"{p} (only in the recomputed summary)"
            if (d := first_difference(stored[k], fresh[k], p)) is not None:
                return d
        return None
    if isinstance(stored, list) and isinstance(fresh, list):
        for i, (a, b) in enumerate(zip(stored, fresh, strict=False)):
            if (d := first_difference(a, b, f"{path}[{i}]")) is not None:
                return d
        if len(stored) != len(fresh):
            return f"{path or '<top>'} (length {len(stored)} in summary.json, {len(fresh)} recomputed)"
        return None
    if type(stored) is not type(fresh) or stored != fresh:
        return f"{path or '<top>'} (summary.json: {_short(stored)}, recomputed: {_short(fresh)})"
    return None


def _short(v: Any) -> str:
    s = json.dumps(v)
    return s if len(s) <= 60 else s[:57] + "..."
