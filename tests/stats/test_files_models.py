"""The typed bundle files of the stats room read back every file kit writes: summary.json, records.jsonl
lines and client.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter
from support.bundles import ArmModel, BundleSpec, make_bundle

from kit.files.client import ClientReport
from kit.files.records import Record
from kit.files.summary import SUMMARY_SCHEMA_VERSION, Summary
from kit.load import LevelResult, LevelSpec
from kit.load._level import write_client_json
from kit.stats import SCHEMA_VERSION, summarize_bundle

SPECS = {
    "plain": BundleSpec(repeats=2, levels=(1, 4), requests=16),
    "rich": BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(experts_factor=0.7)}, repeats=3,
                       levels=(2,), requests=12, server_metrics=True, errors_per_level=2,
                       failed={"oea-r2": "server died"}, client_bound=frozenset({("oea-r1", 2)})),
    "single": BundleSpec(repeats=1, levels=(1,), requests=8),
}


@pytest.fixture(scope="module", params=sorted(SPECS))
def bundle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_bundle(tmp_path_factory.mktemp(request.param) / "b", SPECS[request.param])


def test_summary_model_reads_back_every_summary_unchanged(bundle: Path) -> None:
    doc = summarize_bundle(bundle)
    assert doc["schema_version"] == SCHEMA_VERSION == SUMMARY_SCHEMA_VERSION
    for source in (doc, json.loads(json.dumps(doc))):
        model = Summary.model_validate(source)
        back = model.model_dump(exclude_unset=True)
        assert json.dumps(back, sort_keys=True) == json.dumps(source, sort_keys=True)  # ints stay ints


def test_records_match_the_typed_line(bundle: Path) -> None:
    adapter = TypeAdapter(Record)
    fields = set(Record.__annotations__)
    lines = [json.loads(line) for p in sorted(bundle.glob("cells/*/level-*/records.jsonl"))
             for line in p.read_text(encoding="utf-8").splitlines()]
    assert lines
    for rec in lines:
        adapter.validate_python(rec, strict=True)
        assert set(rec) <= fields


def test_client_report_reads_the_synthetic_ones(bundle: Path) -> None:
    for p in sorted(bundle.glob("cells/*/level-*/client.json")):
        report = ClientReport.model_validate_json(p.read_bytes())
        assert report.format_version == 1 and report.workers


def test_client_report_reads_what_kit_load_writes(tmp_path: Path) -> None:
    spec = LevelSpec(base_url="http://127.0.0.1:1", endpoint="chat", model="m", concurrency=4, requests=10,
                     warmup_requests=2, prompt_tokens=8, output_tokens=4, seed=0, request_timeout_s=5.0,
                     processes=1, tags={"arm": "a", "repeat": 1, "level": 4})
    path = tmp_path / "client.json"
    result = LevelResult(tmp_path / "records.jsonl", path, 9, 1, 1.5, False, [], processes=1, out_tokens=36)
    worker = {"worker": 0, "pid": 1, "users": 4, "requests": 10, "ok": 9, "errors": 1, "first_error": "http 500",
              "out_tokens": 36, "usage_completion_tokens": 36, "wall_s": 1.5, "start_wall": 1.0, "end_wall": 2.5,
              "cpu_s": 0.2, "cpu_share": 0.1333, "cpu_window_s": 0.25, "cpu_window_share_max": 0.3,
              "cpu_window_share_p50": 0.1, "cpu_us_per_token": 5555.56, "tokens_per_s": 24.0,
              "lag": {"samples": 150, "p50_ms": 0.1, "p99_ms": 7.5, "max_ms": 9.0},
              "itl": {"gaps": 27, "median_ms": 4.0, "p99_ms": 8.0, "near_zero_share": 0.0},
              "rlimit_nofile": 1024, "warmup": {"requests": 2, "ok": 2, "errors": 0, "wall_s": 0.1,
                                                "first_error": None}}
    write_client_json(spec, result, [worker], path)  # type: ignore[list-item]
    report = ClientReport.model_validate_json(path.read_bytes())
    assert report.ok == 9 and report.timing_warnings and report.workers[0].lag is not None
    assert report.spec["concurrency"] == 4
