"""Review: what ``kit verify``'s schedule check (kit.bundle.schedules.check_schedules) can and cannot catch.

1. The schedule is rebuilt from the ``spec`` in the level's own ``client.json``, never from the signed manifest:
   a kit that ran a level at the wrong rate or seed (a wiring bug: rates dealt to the wrong level, a changed
   ARRIVAL_SEED_OFFSET) writes a spec and records that agree with each other, and verify says "sent as
   scheduled" although the manifest asked for something else.
2. Only the *labels* (``sched_ns``) are compared, not when requests went out: every record of one worker obeys
   t_start_ns - sched_ns - queue_ns - late_ns == the level's t0 (checked on a real demo-poisson bundle: one
   distinct value per level), yet a record sent seconds off its due time with a small ``late_ns`` passes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.bundle.schedules import check_schedules
from kit.load.arrivals import Arrival, schedule_ns

COUNT, T0 = 36, 2_611_222_204_722


def _bundle(root: Path, *, spec_rate: float, spec_seed: int, shift_one_ns: int = 0) -> Path:
    """One open-loop level as kit writes it: client.json's spec and records.jsonl whose sched_ns follow it."""
    d = root / "cells" / "baseline-r1" / "level-48"
    d.mkdir(parents=True)
    spec = {"base_url": "http://127.0.0.1:18080", "endpoint": "chat", "model": "kit-moe", "concurrency": 48,
            "requests": COUNT, "warmup_requests": 4, "prompt_tokens": 32, "output_tokens": 16, "seed": 55,
            "request_timeout_s": 120.0, "processes": 0, "tags": {"arm": "baseline", "repeat": 1, "level": 48},
            "dialect": "sglang", "cpus": None, "arrival": "poisson", "rate": spec_rate, "burstiness": 1.0,
            "arrival_seed": spec_seed, "duration_s": None, "window": "all"}
    (d / "client.json").write_text(json.dumps({"schema": 1, "spec": spec, "stopped": False,
                                               "workers": [{"worker": 0, "unsent": 0}]}))
    lines = []
    for i, due in enumerate(schedule_ns(Arrival("poisson", spec_rate, 1.0, spec_seed), COUNT)):
        late = 100_000
        start = T0 + due + late + (shift_one_ns if i == 5 else 0)
        lines.append(json.dumps({"arm": "baseline", "repeat": 1, "level": 48, "rid": f"w0-{i}", "worker": 0,
                                 "t_start_ns": start, "wall_start": 1.0, "ttft_ns": 1000, "chunk_ns": [1000],
                                 "e2e_ns": 2000, "client_tokens": 1, "status": 200, "error": None,
                                 "sched_ns": due, "late_ns": late, "queue_ns": 0}))
    (d / "records.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_the_check_does_catch_records_of_another_schedule(tmp_path: Path) -> None:
    """Holds: records labelled from seed 1 under a spec that says seed 7974 are caught."""
    root = _bundle(tmp_path, spec_rate=12.0, spec_seed=7974)
    doc = json.loads((root / "cells/baseline-r1/level-48/client.json").read_text())
    doc["spec"]["arrival_seed"] = 1
    (root / "cells/baseline-r1/level-48/client.json").write_text(json.dumps(doc))
    _, problems = check_schedules(root)
    assert problems and "not in the schedule rebuilt" in problems[0]


@pytest.mark.xfail(strict=True, reason="review: the schedule is rebuilt from client.json, not the signed manifest")
def test_a_level_run_at_the_wrong_rate_is_caught(tmp_path: Path) -> None:
    # the manifest (demo-poisson) asks 12 requests/s, seed 7 + 48 + 7919 = 7974 at this level; the kit ran 6/s
    root = _bundle(tmp_path, spec_rate=6.0, spec_seed=7974)
    note, problems = check_schedules(root)
    assert problems, note  # today: "1 open-loop level(s) sent as scheduled"


@pytest.mark.xfail(strict=True, reason="review: only sched_ns labels are compared, not the send times")
def test_a_request_sent_two_seconds_off_its_due_time_is_caught(tmp_path: Path) -> None:
    root = _bundle(tmp_path, spec_rate=12.0, spec_seed=7974, shift_one_ns=2_000_000_000)
    note, problems = check_schedules(root)
    assert problems, note  # today: "sent as scheduled"; late_ns says 0.1 ms
