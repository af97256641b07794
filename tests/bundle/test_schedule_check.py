"""What ``kit verify``'s schedule check (kit.bundle.schedules.check_schedules) catches.

1. The schedule is rebuilt from the signed ``manifest.yaml`` (demo-poisson: 12 requests/s at level 48, seed
   7 + 48 + 7919 = 7974, 48 requests), not from the ``spec`` in the level's own ``client.json``: a kit that ran a
   level at the wrong rate or seed writes a spec and records that agree with each other, and is still caught.
2. Send times, not only the ``sched_ns`` labels: every record of a worker obeys t_start_ns - sched_ns - queue_ns -
   late_ns == the worker's t0_ns, so a record sent seconds off its due time with a small ``late_ns`` is caught.

Independent reference: the schedule is built here with the seed and rate written out by hand from the manifest's
numbers, and the bundle's files are written the way kit writes them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kit.bundle.schedules import check_schedules
from kit.load.arrivals import Arrival, schedule_ns

ROOT = Path(__file__).resolve().parents[2]
COUNT, T0, RATE, SEED = 48, 2_611_222_204_722, 12.0, 7 + 48 + 7919


def _bundle(root: Path, *, spec_rate: float = RATE, spec_seed: int = SEED, records_seed: int | None = None,
            shift_one_ns: int = 0, t0: bool = True) -> Path:
    """One open-loop level of demo-poisson as kit writes it: the signed manifest, client.json's spec and workers,
    records.jsonl whose sched_ns follow the records' seed."""
    shutil.copy(ROOT / "experiments" / "demo-poisson.yaml", root / "manifest.yaml")
    d = root / "cells" / "baseline-r1" / "level-48"
    d.mkdir(parents=True)
    spec = {"base_url": "http://127.0.0.1:18080", "endpoint": "chat", "model": "kit-moe", "concurrency": 48,
            "requests": COUNT, "warmup_requests": 4, "prompt_tokens": 32, "output_tokens": 16, "seed": 55,
            "request_timeout_s": 120.0, "processes": 0, "tags": {"arm": "baseline", "repeat": 1, "level": 48},
            "dialect": "sglang", "cpus": None, "arrival": "poisson", "rate": spec_rate, "burstiness": 1.0,
            "arrival_seed": spec_seed, "duration_s": None, "window": "all"}
    worker: dict[str, object] = {"worker": 0, "unsent": 0, **({"t0_ns": T0} if t0 else {})}
    (d / "client.json").write_text(json.dumps({"schema": 1, "spec": spec, "stopped": False, "workers": [worker]}))
    seed = spec_seed if records_seed is None else records_seed
    lines = []
    for i, due in enumerate(schedule_ns(Arrival("poisson", spec_rate, 1.0, seed), COUNT)):
        late, queue = 100_000, (3_000_000 if i == 7 else 0)
        start = T0 + due + queue + late + (shift_one_ns if i == 5 else 0)
        lines.append(json.dumps({"arm": "baseline", "repeat": 1, "level": 48, "rid": f"w0-{i}", "worker": 0,
                                 "t_start_ns": start, "wall_start": 1.0, "ttft_ns": 1000, "chunk_ns": [1000],
                                 "e2e_ns": 2000, "client_tokens": 1, "status": 200, "error": None,
                                 "sched_ns": due, "late_ns": late, "queue_ns": queue}))
    (d / "records.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_a_level_sent_as_the_manifest_scheduled_passes(tmp_path: Path) -> None:
    note, problems = check_schedules(_bundle(tmp_path))
    assert problems == [] and note == "1 open-loop level(s) sent as the signed manifest scheduled (48 send times " \
        "checked)"


def test_records_of_another_schedule_are_caught(tmp_path: Path) -> None:
    _, problems = check_schedules(_bundle(tmp_path, records_seed=1))
    assert len(problems) == 1 and "not in the schedule rebuilt from seed 7974" in problems[0]


def test_a_level_run_at_the_wrong_rate_is_caught(tmp_path: Path) -> None:
    # the kit ran 6/s; its client.json and records agree with each other, not with the signed manifest
    _, problems = check_schedules(_bundle(tmp_path, spec_rate=6.0))
    assert problems and "rate 6.0 (manifest: 12.0)" in problems[0]
    assert any("not in the schedule rebuilt from seed 7974" in p for p in problems)


def test_a_level_run_with_another_seed_is_caught(tmp_path: Path) -> None:
    _, problems = check_schedules(_bundle(tmp_path, spec_seed=SEED - 7919))  # ARRIVAL_SEED_OFFSET dropped
    assert problems and f"arrival_seed {SEED - 7919} (manifest: {SEED})" in problems[0]


def test_a_request_sent_two_seconds_off_its_due_time_is_caught(tmp_path: Path) -> None:
    _, problems = check_schedules(_bundle(tmp_path, shift_one_ns=2_000_000_000))
    assert len(problems) == 1 and "1 record(s) not sent when" in problems[0] and "w0-5: sent +2000.000 ms" \
        in problems[0]


def test_a_bundle_without_t0_checks_the_labels_only(tmp_path: Path) -> None:
    note, problems = check_schedules(_bundle(tmp_path, shift_one_ns=2_000_000_000, t0=False))
    assert problems == [] and "send times not recorded" in note
