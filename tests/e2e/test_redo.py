"""`kit run --resume DIR --redo failed|client-bound` against the real demo engine: a cell whose server fails at
its first start (a wrapper that exits once, then starts the engine) is re-run by the redo; its first attempt is
kept (under failed/, where every resume puts a failed attempt), recorded in run.json as redone, excluded from the statistics, and `kit verify` passes (the rule holds:
that attempt did fail). A redo of a complete bundle with nothing flagged changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from crash_helpers import files_of, processes_with
from e2e_helpers import ROOT, bundle_of, read_json
from support.manifests import engine_command, manifest_data, write_manifest
from support.ports import free_port

from kit.bundle.redo import to_redo
from kit.verify import verify_target

pytestmark = pytest.mark.slow


def _kit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit", *args], capture_output=True, text=True, timeout=400,
                          env={**os.environ, "COLUMNS": "4000"}, cwd=ROOT, check=False)


def test_redo_failed_re_runs_only_the_failed_cell_and_keeps_its_first_attempt(
        tmp_path: Path, isolated: dict[str, str]) -> None:
    flag = tmp_path / "failed-once"
    once = ["sh", "-c", f'if [ ! -e {flag} ]; then touch {flag}; echo "failing once" >&2; exit 3; fi; exec "$0" "$@"']
    arms = [{"name": "baseline"}, {"name": "oea", "command": [*once, *engine_command()], "args": ["--oea-k0", "2"]}]
    m = write_manifest(tmp_path / "redo.yaml", manifest_data(
        "redo", port=free_port(), arms=arms, server={"ready_timeout_s": 60, "stop_grace_s": 5},
        load={"levels": [1], "requests_per_level": 4, "warmup_requests": 1, "prompt_tokens": 8, "output_tokens": 4,
              "seed": 3, "request_timeout_s": 60},
        design={"repeats": 1}, gates={"port_deadline_s": 5}))
    out = tmp_path / "results"
    first = _kit("run", str(m), "--out", str(out), "--allow-unsigned")
    assert first.returncode != 0 and "1 cell(s) failed (oea-r1" in first.stderr, first.stdout + first.stderr
    b = bundle_of(out)
    ok_before = files_of(b / "cells" / "baseline-r1")
    assert to_redo(b, ["baseline-r1", "oea-r1"], ["failed"]) == ["oea-r1"]

    redo = _kit("run", "--resume", str(b), "--allow-unsigned", "--redo", "failed")
    assert redo.returncode == 0, redo.stdout + redo.stderr
    assert "1 cell(s) already complete, 1 to run" in redo.stdout + redo.stderr
    run = read_json(b / "run.json")
    assert run["status"] == "complete"
    [record] = run["resumed"][0]["redone"]
    assert record == {"cell": "oea-r1", "reason": "failed", "attempt": "failed/oea-r1-a1", "why": "status failed"}
    assert read_json(b / "failed/oea-r1-a1/cell.json")["status"] == "failed"  # the original, kept
    assert "failing once" in (b / "failed/oea-r1-a1/server.log").read_text()
    assert read_json(b / "cells/oea-r1/cell.json")["status"] == "ok"
    assert files_of(b / "cells" / "baseline-r1") == ok_before  # the complete cell untouched
    summary = read_json(b / "summary.json")
    assert summary["failed_cells"] == [] and {c["id"]: c["status"] for c in summary["cells"]} == {
        "baseline-r1": "ok", "oea-r1": "ok"}
    verify_target(b, [])  # signatures, every file (redone/ included), the summary, and the redo rule
    assert processes_with(env_entry=f"XDG_STATE_HOME={isolated['XDG_STATE_HOME']}") == []

    flagged = to_redo(b, ["baseline-r1", "oea-r1"], ["client-bound", "failed"])  # this busy machine may flag one
    before = files_of(b)
    again = _kit("run", "--resume", str(b), "--allow-unsigned", "--redo", "client-bound", "--redo", "failed")
    assert again.returncode == 0, again.stdout + again.stderr
    if not flagged:
        assert "nothing to redo" in again.stdout + again.stderr and files_of(b) == before
    else:  # a level the load generator limited: re-run, the first kept beside it
        assert {r["cell"] for r in read_json(b / "run.json")["resumed"][-1]["redone"]} == set(flagged)
        verify_target(b, [])
    json.dumps(summary)
