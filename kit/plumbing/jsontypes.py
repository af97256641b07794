"""Names for JSON-shaped data whose keys kit does not own (Docker inspect output, YAML documents,
evidence copied from other tools): what a ``json.dumps`` accepts, said in the type."""

from __future__ import annotations

from typing import TypeAlias

Json: TypeAlias = "dict[str, Json] | list[Json] | str | int | float | bool | None"
JsonObject: TypeAlias = "dict[str, Json]"
