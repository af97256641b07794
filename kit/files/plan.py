"""``plan.json``: the cells in run order and the levels every cell runs."""

from __future__ import annotations

from typing import ClassVar

from kit.files.base import BundleFile, Loose


class PlannedCell(Loose):
    index: int
    arm: str
    repeat: int
    id: str


class PlannedLevel(Loose):
    concurrency: int
    """Closed loop: the users; open loop: the most requests in flight at once."""
    requests: int
    warmup: int
    rate: float | None = None
    """Open loop: the level's request rate (requests/s); absent in a closed loop."""


class PlanFile(BundleFile):
    file_pattern: ClassVar[str] = "plan.json"

    order: str
    cells: list[PlannedCell]
    levels: list[PlannedLevel]

    def same_design(self, other: PlanFile) -> bool:
        """True when both plans run the same cells and levels in the same order (schema_version aside)."""
        return self.model_dump(exclude={"schema_version"}) == other.model_dump(exclude={"schema_version"})
