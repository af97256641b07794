"""The dataset is read, hashed and tokenized once per run: ``check_dataset`` (kit run's preflight) returns the
Workload that did it, and every level of every cell is built from it (kit.experiment.workloads), each level's seed
cutting from the same encoding of the text."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kit.manifest.load import Load
from kit.workload import check_dataset


def test_the_preflight_workload_builds_every_level_without_reading_again(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"w{i % 97}" for i in range(5000)))
    load = Load.model_validate({"levels": [1, 2], "prompt_tokens": 12, "output_tokens": 3, "tokenizer": "words",
                                "dataset": {"kind": "text", "file": {
                                    "path": str(text), "sha256": hashlib.sha256(text.read_bytes()).hexdigest()}}})
    workload = check_dataset(load, None)
    assert workload is not None
    whole: list[int] = []
    encode = workload.counter.encode
    monkeypatch.setattr(workload.counter, "encode", lambda s: (whole.append(len(s)) if len(s) > 10_000 else None)
                        or encode(s))
    text.write_text("changed since the preflight")  # a second read would fail its sha256
    for level in (1, 2):  # what kit.experiment.workloads asks per level: its own seed
        items = workload.level(5, load.seed + level)
        assert all(it.prompt_tokens == 12 for it in items)
    assert whole == []  # the text is never encoded whole again
