"""`kit run` end to end with the real engine capped at a batch of 4 (``--max-batch 4``: the independent truth of
what the server can run at once): at c=4 the telemetry sees a batch of 4 and no queue, at c=8 a batch of at
most 4 and requests queued, and the report says so. Each decode step lasts at least 25 ms (``--min-step-ms``, an
accelerator's step time, asleep): a level lasts ~15 s, long enough to judge, at a sixteenth of the tokens (and
CPU) that 768 tokens a request took before. The slow tier (a `kit run`, ~70 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.manifests import ENGINE_ARGS, ab_arms, engine_command, manifest_data, write_manifest
from support.scrapes import assert_scrapes_answered

from kit.files.schema import validate_bundle_files
from kit.stats.telemetry import MIN_SAMPLES

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.plots
def test_the_report_shows_the_batch_the_server_ran(tmp_path: Path, port: int) -> None:
    m = write_manifest(tmp_path / "capped.yaml", manifest_data(
        "capped", port=port, arms=ab_arms(same=True),
        command=engine_command(engine_args=(*ENGINE_ARGS, "--max-batch", "4", "--min-step-ms", "25")),
        server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [4, 8], "requests_per_level": 48, "warmup_requests": 2, "prompt_tokens": 8,
              "output_tokens": 48, "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1, "order": "interleaved"}, gates={"port_deadline_s": 5}))
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
           "DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock"}
    r = subprocess.run([sys.executable, "-m", "kit", "run", str(m), "--out", str(tmp_path / "out"),
                        "--allow-unsigned"], capture_output=True, text=True, timeout=400, env=env, cwd=ROOT,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    (b,) = (tmp_path / "out").iterdir()
    checked = set(validate_bundle_files(b, json.loads((ROOT / "bundle.schema.json").read_text())))
    assert {"cells/a1-r1/level-8/telemetry.json", "cells/a1-r1/level-8/telemetry.jsonl"} <= checked
    summary = json.loads((b / "summary.json").read_text())
    for cell in summary["cells"]:
        four, eight = cell["levels"]["4"]["telemetry"], cell["levels"]["8"]["telemetry"]
        assert four["samples"] >= 3 and eight["samples"] >= 3, (four, eight)
        # c=4: a batch of 4; a request may wait a step for admission (queued > 0 in a sample), not for a slot.
        # Judged only with enough samples after the first tick (MIN_SAMPLES; a shorter level reads "too short to
        # tell"): the step floor makes each level last >= 12 waves x 47 decode steps x 25 ms = 14.1 s on any machine
        # (a busy one only longer), 14 ticks at 1 s; the rule itself is tests/telemetry/test_queue_bound_rule.py's.
        assert four["samples"] > MIN_SAMPLES and eight["samples"] > MIN_SAMPLES, (four, eight)
        assert four["running_max"] == 4 and four["queue_bound"] is False, four
        assert eight["running_max"] == 4 and eight["queued_max"] > 0
        assert eight["queue_bound"] is True, eight  # the reason says why not (a failed scrape: fewer readings)
        assert eight["batch_note"] == "the running batch never reached 8 (max 4)"
        info = json.loads((b / "cells" / cell["id"] / "level-8" / "telemetry.json").read_text())
        assert info["sources"]["running"] == "kit_engine_requests_running", info
        assert_scrapes_answered(info)
        assert info["started_unix"] > 0 and info["cpu_s"] >= 0
    report = (b / "report.md").read_text()
    row8 = next(x for x in report.splitlines() if x.startswith("| a1-r1 |") and "never reached 8 (max 4)" in x)
    assert " / 4 |" in row8
    assert "**Queue-bound levels** (telemetry)" in report and "> - c=8: a1-r1, a2-r1 (the server ran at most 4" in report
    assert "| **yes**: requests queued behind a running batch" in row8
    assert "What the server ran at c=4" in report
    for png in ("pareto.png", "latency_cdf.png", "drift.png", "cells/a1-r1.png", "cells/a2-r1.png"):
        assert (b / "plots" / png).stat().st_size > 10_000, png
