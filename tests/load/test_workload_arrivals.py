"""A workload (load.dataset) sent open loop and time-limited: request i carries workload line i at the due time of
schedule index i, over two driver processes, against kit's demo engine (a real server that counts the prompt's
words itself); and the manifest bounds what a dataset makes kit build before a time-limited level.

Independent references: the engine's own usage.prompt_tokens for every request, and the schedule rebuilt here from
the level's settings with ``schedule_ns``.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from kit.load import run_level
from kit.load.arrivals import Arrival, count_for, schedule_ns
from kit.manifest.load import Load
from kit.workload import Workload, encode_lines

from ._support import make_spec, read_records

ROOT = Path(__file__).resolve().parents[2]
READY = "kit-engine ready on http://"
SMALL = ["--experts", "16", "--top-k", "4", "--layers", "2", "--hidden", "64", "--expert-ffn", "64", "--vocab", "256"]
LOAD = {"levels": [4], "warmup_requests": 2, "output_tokens": 4, "tokenizer": "words", "seed": 3,
        "dataset": {"kind": "random", "input_len": 24, "output_len": 4, "range_ratio": 0.5},
        "arrival": {"process": "poisson", "rates": [16], "duration_s": 1.5}}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[str]:
    with (tmp_path / "engine.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "kit.engine", "--host", "127.0.0.1", "--port", "0",
                                 "--served-name", "fake-model", *SMALL], cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=log, text=True)
        lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        out = proc.stdout
        threading.Thread(target=lambda: [lines.put(line) for line in out], daemon=True).start()
        try:
            line = ""
            while not line.startswith(READY):
                line = lines.get(timeout=60)
            yield "http://" + line[len(READY):].strip()
        finally:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.mark.slow  # a real process or server for seconds: the slow tier (unit tier budget, issue 21)
def test_an_open_loop_time_limited_workload_sends_line_i_at_due_time_i(engine: str, tmp_path: Path) -> None:
    load = Load.model_validate(LOAD)
    n = load.requests_at(4)
    arrival = Arrival("poisson", 16.0, 1.0, load.arrival_seed_at(4))
    assert n == count_for(arrival, 1.5) == 24  # what kit builds is what the level schedules, not a ceiling
    items = Workload(load, None).level(n + load.warmup_at(4), seed=load.seed + 4)
    wl = tmp_path / "workload.jsonl"
    wl.write_bytes(encode_lines(items))
    spec = make_spec(engine, concurrency=4, requests=n, warmup_requests=2, output_tokens=4, workload=str(wl),
                     arrival="poisson", rate=16.0, arrival_seed=arrival.seed, duration_s=1.5, processes=2)
    res = run_level(spec, tmp_path / "level")
    recs = read_records(res.records_path)
    assert res.errors == 0 and res.ok == n and {r["worker"] for r in recs} == {0, 1}
    want = schedule_ns(arrival, n)
    assert sorted(r["workload_index"] for r in recs) == list(range(n))  # the warm-up's lines n.. not recorded
    for r in recs:
        i = r["workload_index"]
        assert r["sched_ns"] == want[i]  # line i went out at schedule index i's due time
        assert r["prompt_tokens_expected"] == items[i].prompt_tokens and r["max_tokens"] == items[i].max_tokens
        assert r["usage_prompt_tokens"] == items[i].prompt_tokens and r["prompt_flag"] is None  # the engine's count
    assert len({items[r["workload_index"]].prompt_tokens for r in recs}) > 3  # lengths vary: a mix-up would show


def test_a_time_limited_closed_loop_dataset_level_needs_its_ceiling() -> None:
    closed = {**LOAD, "arrival": {"process": "closed", "duration_s": 5}}
    with pytest.raises(ValidationError, match=r"load\.requests_per_level: a time-limited closed-loop level "
                                              r"with load\.dataset needs it"):
        Load.model_validate(closed)
    assert Load.model_validate({**closed, "requests_per_level": 200}).requests_at(4) == 200
    with pytest.raises(ValidationError, match="over 100,000 built per level"):
        Load.model_validate({**closed, "requests_per_level": 100_000})
    with pytest.raises(ValidationError, match="over 100,000 built per level"):  # open loop: rate x duration_s
        Load.model_validate({**LOAD, "levels": [4], "arrival": {"process": "poisson", "rates": [1000],
                                                                "duration_s": 600}})
    assert Load.model_validate({**closed, "dataset": None}).requests_at(4) == 1_000_000  # word prompts: lazy
