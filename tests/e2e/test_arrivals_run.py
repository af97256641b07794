"""The shipped open-loop manifests (experiments/demo-poisson.yaml, demo-gamma.yaml), signed with the example key,
run with `kit run` against kit's real CPU engine; the bundle's records hold what was intended and what was sent."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
import yaml
from e2e_helpers import ROOT, bundle_of, kit, own_network, read_json
from scipy import stats

from kit.bundle.schedules import check_schedules
from kit.files.records import steady_window
from kit.load.arrivals import Arrival, count_for, schedule_ns
from kit.manifest.load import ARRIVAL_SEED_OFFSET


def records(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sent_gaps_s(recs: list[dict]) -> list[float]:  # type: ignore[type-arg]
    t0 = {r["t_start_ns"] - r["late_ns"] - r["queue_ns"] - r["sched_ns"] for r in recs}
    sent = sorted(r["t_start_ns"] for r in recs)
    return [(b - a) / 1e9 for a, b in zip([min(t0), *sent[:-1]], sent, strict=True)]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo-poisson", "demo-gamma"])
def test_shipped_open_loop_manifest_runs_and_records_its_schedule(tmp_path: Path, isolated: dict[str, str],
                                                                  name: str) -> None:
    manifest = ROOT / "experiments" / f"{name}.yaml"
    trust = str(ROOT / "allowed_signers")
    assert kit("verify", "--trust", trust, str(manifest), env=isolated).returncode == 0
    r = kit("run", "--trust", trust, str(manifest), "--out", str(tmp_path / "r"), env=isolated, timeout=600,
            prefix=own_network())
    assert r.returncode == 0, r.stdout + r.stderr
    b = bundle_of(tmp_path / "r")
    assert kit("verify", str(b), env=isolated).returncode == 0
    # verify's schedule check placed every send of the real run from its worker's t0_ns; a send moved 2 s is caught
    note, problems = check_schedules(b)
    assert problems == [] and "send times checked" in note, (note, problems)
    moved = tmp_path / "moved"
    shutil.copytree(b, moved)
    path = sorted(moved.glob("cells/*/level-*/records.jsonl"))[0]
    lines = path.read_text().splitlines()
    first = json.loads(lines[0])
    lines[0] = json.dumps({**first, "t_start_ns": first["t_start_ns"] + 2_000_000_000})
    path.write_text("\n".join(lines) + "\n")
    assert any("not sent when" in p for p in check_schedules(moved)[1])
    load = yaml.safe_load(manifest.read_text())["load"]
    arrival = load["arrival"]
    plan = read_json(b / "plan.json")
    assert [lv["rate"] for lv in plan["levels"]] == arrival["rates"]
    summary = read_json(b / "summary.json")
    for lv, rate in zip(plan["levels"], arrival["rates"], strict=True):
        level = lv["concurrency"]
        a = Arrival(arrival["process"], float(rate), float(arrival.get("burstiness", 1.0)),
                    load["seed"] + level + ARRIVAL_SEED_OFFSET)
        count = count_for(a, arrival["duration_s"]) if "duration_s" in arrival else lv["requests"]
        want = schedule_ns(a, count)
        kept = 0
        for cell in plan["cells"]:
            d = b / "cells" / cell["id"] / f"level-{level}"
            recs = records(d / "records.jsonl")
            # intended (rebuilt from the signed manifest alone) == what the records say was scheduled
            assert sorted(r["sched_ns"] for r in recs) == want
            assert all(r["late_ns"] >= 0 and r["queue_ns"] >= 0 for r in recs)
            workers = read_json(d / "client.json")["workers"]
            assert workers[0]["scheduled"] == count and workers[0]["lateness"]["requests"] == len(recs)
            keep = steady_window(workers)
            kept += sum(1 for r in recs if keep(r) and r["status"] == 200)
            # one cell's sends (every cell has the same schedule: one sample, not four copies)
            if cell is plan["cells"][0]:
                gaps = sent_gaps_s(recs)
                assert statistics.mean(gaps) == pytest.approx(1 / rate, rel=0.05)
                if arrival["process"] == "poisson":
                    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.001
                else:  # the gamma at that burstiness, and burstier than Poisson (CV 1/sqrt(0.25) = 2, not 1)
                    shape = float(arrival["burstiness"])
                    assert stats.kstest(gaps, "gamma", args=(shape, 0, 1 / (rate * shape))).pvalue > 0.001
                    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue < 0.05
        ok = sum(e["ok"] for e in summary["arm_levels"] if e["level"] == level)
        # the statistics saw exactly the requests of the window (all of them without one)
        assert ok == kept
        if arrival.get("window") == "steady":
            assert ok < len(plan["cells"]) * count
