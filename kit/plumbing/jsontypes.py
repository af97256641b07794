"""Names for JSON-shaped data whose keys kit does not own (Docker inspect output, YAML documents,
evidence copied from other tools). ``object`` rather than a recursive union: TypedDicts and lists of
them are JSON too, and mypy's invariant dicts would refuse them in a recursive ``Json``."""

from __future__ import annotations

from typing import TypeAlias

Json: TypeAlias = object
JsonObject: TypeAlias = dict[str, object]
