"""design.redo_client_bound against the real demo engine and the real load client: the first cell's load driver is
descheduled again and again from the middle of its level on (SIGSTOP for 40 ms every 100 ms, from outside, as a busy
host does to it), kit.load's guardrail flags the level client-bound (its lag grew), and the cell is set aside under redone/ with its evidence, recorded in
run.json and measured again at once, before the next cell; the run completes and `kit verify` checks the rule."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from e2e_helpers import bundle_of
from support.manifests import manifest_data, write_manifest
from support.pasted import pasted
from support.ports import free_port

pytestmark = pytest.mark.slow
REQUESTS = 80


def _disturb_first_driver(kit: subprocess.Popen[str], out: Path, done: threading.Event) -> None:
    """Once the first cell's level has recorded half its requests, SIGSTOP/SIGCONT its load driver until it ends:
    the driver's scheduling lag then grows over the level (the guardrail's "client-bound": a steady lag is only a
    timing warning)."""
    deadline = time.monotonic() + 120
    driver: psutil.Process | None = None
    while time.monotonic() < deadline and not done.is_set():
        records = list(out.glob("*/cells/*/level-1/records.jsonl"))
        if records and len(records[0].read_bytes().splitlines()) >= REQUESTS // 2:
            try:
                driver = next((p for p in psutil.Process(kit.pid).children(recursive=True)
                               if "kit.load.driver" in " ".join(p.cmdline())), None)
            except psutil.Error:
                pass
            break
        time.sleep(0.005)
    until = time.monotonic() + 60
    while driver is not None and time.monotonic() < until and not done.is_set():
        try:
            driver.send_signal(signal.SIGSTOP)
            time.sleep(0.04)
            driver.send_signal(signal.SIGCONT)
            time.sleep(0.06)
        except psutil.Error:
            return


def _manifest(tmp_path: Path, name: str, design: dict[str, object]) -> Path:
    """One level of one request at a time, REQUESTS of them per cell: one cell per arm and repeat."""
    return write_manifest(tmp_path / "remeasure.yaml", manifest_data(
        name, port=free_port(), server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": REQUESTS, "warmup_requests": 1, "prompt_tokens": 8, "output_tokens": 16,
              "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1, "order": "interleaved", **design}, gates={"port_deadline_s": 5}))


def _verifies(b: Path, isolated: dict[str, str]) -> None:
    v = subprocess.run([sys.executable, "-m", "kit", "verify", str(b), "--integrity-only"], env=isolated,
                       capture_output=True, text=True, timeout=300, check=False)
    assert v.returncode == 0, v.stdout + v.stderr


def _run_disturbed(m: Path, out: Path, isolated: dict[str, str]) -> tuple[str, Path]:
    """`kit run` of ``m`` with its first cell's load driver disturbed (``_disturb_first_driver``): its output (it must
    exit 0) and its bundle."""
    kit = subprocess.Popen([sys.executable, "-m", "kit", "run", str(m), "--out", str(out), "--allow-unsigned"],
                           env=isolated, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = threading.Event()
    disturber = threading.Thread(target=_disturb_first_driver, args=(kit, out, done), daemon=True)
    disturber.start()
    try:
        output, _ = kit.communicate(timeout=600)
    finally:
        done.set()
        disturber.join()
    assert kit.returncode == 0, output
    return output, bundle_of(out)


def test_a_client_bound_cell_is_measured_again_at_once(tmp_path: Path, isolated: dict[str, str]) -> None:
    m = _manifest(tmp_path, "remeasure", {"redo_client_bound": 1})
    output, b = _run_disturbed(m, tmp_path / "results", isolated)
    first = json.loads((b / "plan.json").read_text())["cells"][0]["id"]
    run = json.loads((b / "run.json").read_text())
    [record] = [r for r in run["redone"] if r["cell"] == first]  # a busy machine may flag another cell too
    assert record["cell"] == first and record["reason"] == "client-bound", record
    assert record["attempt"] == f"redone/{first}-a1" and record["why"].startswith("level-1: ")
    assert (b / f"redone/{first}-a1/level-1/records.jsonl").is_file()  # the flagged attempt, kept
    flat = " ".join(output.split())
    assert f"cell {first}: client-bound" in flat and "measuring it again (1 of 1" in flat, output
    assert (b / f"cells/{first}/cell.json").is_file()  # measured again
    _verifies(b, isolated)


def test_without_redo_in_the_run_the_printed_next_step_re_measures_only_the_flagged_cells(
        tmp_path: Path, isolated: dict[str, str]) -> None:
    """design.redo_client_bound 0 (a fixed design's default): the flagged cell withholds its level's verdict, and the
    run ends with a `next:` line naming it and the command that re-measures it; that command, pasted into a shell as
    printed, does so: the run's resume records the flagged attempt under redone/ and the bundle verifies."""
    m = _manifest(tmp_path, "later", {})
    output, b = _run_disturbed(m, tmp_path / "results", isolated)
    first = json.loads((b / "plan.json").read_text())["cells"][0]["id"]
    [step] = [line for line in output.splitlines() if line.startswith("next: ")] or [output]
    assert f"client-bound ({first}" in step and "under redone/" in step, output
    command = step[step.index("run): kit run --resume ") + len("run): "):]
    assert command.endswith(" --redo client-bound") and "--allow-unsigned" in command, command
    again = pasted(command, tmp_path / "bin", env=isolated, cwd=tmp_path, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    run = json.loads((b / "run.json").read_text())
    redone = [r for res in run["resumed"] for r in res["redone"]]
    assert [r["cell"] for r in redone if r["cell"] == first] == [first], run["resumed"]
    assert all(r["reason"] == "client-bound" for r in redone)
    assert (b / f"redone/{first}-a1/level-1/records.jsonl").is_file()
    _verifies(b, isolated)
