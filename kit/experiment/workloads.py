"""A run's workload files: built once per level from ``load.dataset`` before the level's first cell, written into
the bundle as ``workload/level-<c>.jsonl`` with ``workload/index.json`` beside them, and reused by every later cell
(so every arm and repeat of a level sends the same requests) and on resume."""

from __future__ import annotations

from dataclasses import dataclass, field

from kit.bundle import Bundle
from kit.files.workload import WorkloadIndex
from kit.manifest import Manifest
from kit.plan import LevelPlan
from kit.plumbing.jsontypes import loads
from kit.workload import Workload, encode_lines, sha256


@dataclass
class Workloads:
    m: Manifest
    bundle: Bundle
    built: Workload | None = field(default=None, repr=False)  # the preflight's (kit.workload.check_dataset)

    def path_for(self, lv: LevelPlan) -> tuple[str, int] | None:
        """The level's workload file (absolute) and the largest max_tokens in it; None without load.dataset."""
        if self.m.load.dataset is None:
            return None
        rel = f"workload/level-{lv.concurrency}.jsonl"
        path = self.bundle.path(rel)
        if not path.exists():
            if self.built is None:
                self.built = Workload(self.m.load, self.m.model.path)
            items = self.built.level(lv.requests + lv.warmup, self.m.load.seed + lv.concurrency)
            data = encode_lines(items)
            self.bundle.write_bytes(rel, data)
            self._write_index(str(lv.concurrency), sha256(data))
        most = max(loads(line)["max_tokens"] for line in path.read_bytes().splitlines())
        return str(path.resolve()), int(most)

    def _write_index(self, level: str, digest: str) -> None:
        assert self.built is not None
        rel = "workload/index.json"
        levels: dict[str, str] = {}
        if self.bundle.path(rel).exists():
            levels = dict(WorkloadIndex.model_validate_json(self.bundle.path(rel).read_bytes()).levels)
        levels[level] = digest
        self.bundle.write_json(rel, self.built.index(levels).to_json())
