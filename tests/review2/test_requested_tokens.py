"""Review 2: with a dataset that sets each request's max_tokens (jsonl ``output_tokens``, sharegpt's completion
length, random's output range) kit.stats took ``load.output_tokens`` as "the tokens asked"
(kit/stats/bundle.py: ``_measure(..., m.load.output_tokens)``), although every record carries its own
``max_tokens`` since the workload landed. Two consequences, both on the shipped experiments/workload-jsonl.yaml:

- a response longer than load.output_tokens was "a usage count the server cannot have meant": usage_flagged, and
  any one flagged request withholds every verdict of its level (run here: 134/800 vs 67/400 usage flagged, no
  verdict at all);
- the records.jsonl line bound was max_record_bytes(load.output_tokens): the record of a request that asked for
  6000 tokens (jsonl allows up to 1e6) is longer and was skipped as unparsable: the longest requests vanished from
  the statistics.

Fixed: usage is judged against the record's own max_tokens, and the line bound follows the largest max_tokens the
signed manifest's dataset can ask (``Load.most_max_tokens``), still a bound (a random dataset's output_len).
The driver's side (each request's event cap from its own max_tokens) is tests/load/test_workload_sending.py.
"""

from __future__ import annotations

import json
from pathlib import Path

from kit.files.bounds import max_record_bytes
from kit.manifest import load_manifest
from kit.manifest.load import Load
from kit.stats.bundle import read_records
from kit.stats.requests import usage_flagged

LOAD_OUTPUT_TOKENS = 16  # experiments/workload-jsonl.yaml's load.output_tokens
SHIPPED = Path(__file__).resolve().parents[2] / "experiments" / "workload-jsonl.yaml"


def _record(tokens: int, asked: int | None = None) -> dict[str, object]:
    t0 = 1_000_000_000
    chunks = [t0 + 1_234_567 * i for i in range(tokens)]
    return {"rid": "w0-0", "status": 200, "error": None, "ttft_ns": chunks[0], "e2e_ns": chunks[-1] + 1000,
            "chunk_ns": chunks, "client_tokens": tokens, "usage_completion_tokens": tokens,
            "max_tokens": tokens if asked is None else asked}


def test_a_response_as_long_as_its_own_max_tokens_is_not_flagged() -> None:
    rec = _record(21)  # experiments/data/prompts-devil.jsonl has an item asking 21; its own max_tokens wins
    assert not usage_flagged(rec, LOAD_OUTPUT_TOKENS)
    assert usage_flagged(_record(21, asked=20), LOAD_OUTPUT_TOKENS)  # above its own max_tokens: still flagged
    legacy = _record(21)
    del legacy["max_tokens"]
    assert usage_flagged(legacy, LOAD_OUTPUT_TOKENS)  # no max_tokens of its own: load.output_tokens bounds it


def _lines_read(tmp_path: Path, rec: dict[str, object], load: Load) -> int:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    stream = read_records(path, max_record_bytes(load.most_max_tokens()))
    assert stream is not None
    n = len(list(stream))
    assert n + stream.unparsable == 1
    return n


def test_the_record_of_a_long_request_is_read(tmp_path: Path) -> None:
    load = load_manifest(SHIPPED, allow_unpinned=True).manifest.load
    assert load.output_tokens == LOAD_OUTPUT_TOKENS
    assert _lines_read(tmp_path, _record(6000), load) == 1


def test_the_line_bound_stays_a_bound(tmp_path: Path) -> None:
    """A random dataset asks at most its output_len: a record far longer than that is still refused."""
    load = Load.model_validate({"levels": [1], "output_tokens": 16, "tokenizer": "words",
                                "dataset": {"kind": "random", "input_len": 8, "output_len": 32}})
    assert load.most_max_tokens() == 32
    assert _lines_read(tmp_path, _record(32), load) == 1
    assert _lines_read(tmp_path, _record(6000), load) == 0
