"""A /metrics inside every byte and label bound that is still costly to parse (an outside review, 2026-12-07: 199,000
one-line families, 5 MB, took 1.3 s of CPU a scrape, the sampler 64 % of a core at one scrape a second, unflagged);
and a /metrics refused before the level, reported as "the server exposes no running-request metric"."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.hostile_metrics import HostileMetrics

from kit.stats.telemetry import level_telemetry
from kit.telemetry import LevelSampler, Limits, scrape_all
from kit.telemetry.prom import MAX_LINES

WIDE = Limits(interval_s=0.05, scrape_timeout_s=2.0, max_response_bytes=4 << 20)


def test_more_lines_than_the_bound_are_refused_and_the_reason_kept() -> None:
    with HostileMetrics("too-many-lines") as url:
        got, why = scrape_all(url, WIDE)
    assert got is None and why == (f"more than {MAX_LINES} lines in one response; refused (parsing them would load "
                                   "the machine kit measures)")


@pytest.mark.slow  # a real server, scraped for a second
def test_a_costly_metrics_is_scraped_less_often() -> None:
    """Each scrape's CPU over MAX_CPU_SHARE (5 %) of the interval skips ticks in proportion: counted, not silent."""
    samples = []
    with HostileMetrics("costly") as url, LevelSampler(url, [], samples.append, limits=WIDE) as s:
        while len(samples) < 2:
            time.sleep(0.05)
    tf = s.stop()
    assert tf.throttled_ticks > 0, tf
    ticks = tf.wall_s / WIDE.interval_s
    assert tf.samples + tf.missed_ticks + tf.throttled_ticks >= 0.3 * ticks  # the slots are accounted for


def test_a_refused_metrics_is_named_in_the_level_s_reason(tmp_path: Path) -> None:
    level = tmp_path / "level-4"
    level.mkdir()
    (level / "telemetry.jsonl").write_text(json.dumps({"t_s": 0.5}) + "\n" + json.dumps({"t_s": 1.5}) + "\n")
    with HostileMetrics("too-many-lines") as url:
        _, why = scrape_all(url, WIDE)
    s = LevelSampler(None, [], lambda _: None, metrics_note=why)
    with s:
        pass
    (level / "telemetry.json").write_text(s.stop().model_dump_json())
    got = level_telemetry(level, 4)
    assert got is not None and got.queue_bound is None
    assert got.queue_bound_reason == ("no running-request metric was read: /metrics before the level: more than "
                                      f"{MAX_LINES} lines in one response; refused (parsing them would load the "
                                      "machine kit measures); not sampled")
