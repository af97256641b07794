from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from e2e_helpers import ROOT, bundle_of, kit, read_json, tiny_manifest
from support.terminal import popen_as_from_a_terminal

from kit.files.schema import validate_bundle_files
from kit.plumbing.net import port_bindable
from kit.plumbing.poll import poll_until
from kit.signing import generate_key

# Every test here runs `kit run` end to end with the real engine and load generator (5-15 s each on an idle
# 2-core machine, 70-120 s for the file): the slow tier.
pytestmark = pytest.mark.slow


@pytest.mark.plots
def test_run_verify_report_compare_archive(tmp_path: Path, port: int, isolated: dict[str, str]) -> None:
    # a signed manifest, trusted through --trust
    m = tiny_manifest(tmp_path / "tiny.yaml", port)
    key = generate_key(tmp_path / "k", "researcher@lab")
    trust = tmp_path / "allowed_signers"
    trust.write_text(f'researcher@lab namespaces="kit-manifest" {key.public_line()}\n')
    assert kit("sign", str(m), "--key", str(key.path), env=isolated).returncode == 0
    out = tmp_path / "results"
    r = kit("run", str(m), "--out", str(out), "--trust", str(trust), env=isolated)
    assert r.returncode == 0, r.stdout + r.stderr
    b = bundle_of(out)
    assert "verdicts:" in r.stdout and "bundle:" in r.stdout
    run = read_json(b / "run.json")
    assert run["status"] == "complete" and run["trust"]["signed"] is True
    assert run["trust"]["signers"][0]["principal"] == "researcher@lab"
    assert (b / "manifest.yaml").read_bytes() == m.read_bytes()
    # every JSON file of a fresh bundle validates against bundle.schema.json (jsonschema, not our models)
    schema = json.loads((ROOT / "bundle.schema.json").read_text())
    checked = set(validate_bundle_files(b, schema))
    every_json = {p.relative_to(b).as_posix() for p in b.rglob("*") if p.suffix in (".json", ".jsonl", ".sig")}
    assert every_json - checked == set() and len(checked) > 20
    for cell in read_json(b / "plan.json")["cells"]:
        state = read_json(b / "cells" / cell["id"] / "cell.json")
        assert state["kit_overhead_s"] is not None and state["overhead_parts"]["levels_wall_s"] > 0
    assert (b / "manifest.yaml.sig").read_bytes() == (tmp_path / "tiny.yaml.sig").read_bytes()
    plan = read_json(b / "plan.json")
    assert [c["id"] for c in plan["cells"]] == ["baseline-r1", "oea-r1", "baseline-r2", "oea-r2"]
    pids: set[int] = set()  # the load driver's: one process ran every level of every cell (kit.load.session)
    for cell in plan["cells"]:
        cdir = b / "cells" / cell["id"]
        state = read_json(cdir / "cell.json")
        assert state["status"] == "ok", state
        assert state["stop"]["group_members_left"] == [] and state["stop"]["port_free_after_stop"]
        gates = [json.loads(line) for line in (cdir / "gates.jsonl").read_text().splitlines()]
        assert [g["phase"] for g in gates] == ["before", "after"] and all(g["ok"] for g in gates)
        for level in (1, 4):
            lines = (cdir / f"level-{level}" / "records.jsonl").read_text().splitlines()
            records = [json.loads(x) for x in lines]
            assert len(records) == 16 and all(x["status"] == 200 and x["error"] is None for x in records)
            assert all(x["usage_completion_tokens"] == 8 == x["client_tokens"] for x in records)
            assert all(x["arm"] == cell["arm"] and x["level"] == level for x in records)
            assert (cdir / f"level-{level}" / "client.json").exists()
            pids.update(w["pid"] for w in read_json(cdir / f"level-{level}" / "client.json")["workers"])
            metrics = read_json(cdir / f"level-{level}" / "server_metrics.json")
            assert metrics["after"]["kit_engine_decode_tokens_total"] > (metrics["before"] or {}).get(
                "kit_engine_decode_tokens_total", 0)
        assert "kit-engine ready" in (cdir / "server.log").read_text()
    assert len(pids) == 1, pids
    report = (b / "report.md").read_text()
    headings = [line for line in report.splitlines() if line.startswith("## ")]
    assert headings[0] == "## Verdicts", headings
    assert list((b / "plots").glob("*.png"))
    env = read_json(b / "environment.json")
    assert env["host"]["python"]["version"] and env["git"] is None  # the manifest is outside any git repo

    v = kit("verify", str(b), env=isolated)
    assert v.returncode == 0, v.stdout + v.stderr
    # any byte changed in a record, or an added file: exit 9 naming the file
    rec = b / "cells/oea-r2/level-4/records.jsonl"
    data = rec.read_bytes()
    rec.write_bytes(data[:10] + bytes([data[10] ^ 1]) + data[11:])
    v = kit("verify", str(b), env=isolated)
    assert v.returncode == 9 and "cells/oea-r2/level-4/records.jsonl" in v.stdout + v.stderr
    rec.write_bytes(data)
    (b / "extra.txt").write_text("x")
    v = kit("verify", str(b), env=isolated)
    assert v.returncode == 9 and "extra.txt" in v.stdout + v.stderr
    (b / "extra.txt").unlink()

    a1, a2 = tmp_path / "a1.tar.gz", tmp_path / "a2.tar.gz"
    assert kit("archive", str(b), "-o", str(a1), env=isolated).returncode == 0
    assert kit("archive", str(b), "-o", str(a2), env=isolated).returncode == 0
    assert a1.read_bytes() == a2.read_bytes()
    assert kit("verify", str(a1), env=isolated).returncode == 0

    summary_before = (b / "summary.json").read_bytes()
    r = kit("report", str(b), env=isolated)
    assert r.returncode == 0, r.stderr
    assert (b / "summary.json").read_bytes() == summary_before
    assert kit("verify", str(b), env=isolated).returncode == 0

    c = kit("compare", str(b), str(b), env=isolated)
    assert c.returncode == 0 and "out tok/s" in c.stdout and "DIFFERS" not in c.stdout


def test_unsigned_manifest_is_refused_unless_allowed_and_recorded(tmp_path: Path, port: int,
                                                                  isolated: dict[str, str]) -> None:
    m = tiny_manifest(tmp_path / "t.yaml", port, levels=(1,), requests=4, repeats=1)
    out = tmp_path / "r"
    r = kit("run", str(m), "--out", str(out), env=isolated)
    assert r.returncode == 4 and "not signed" in r.stderr
    assert not out.exists()
    r = kit("run", str(m), "--out", str(out), "--allow-unsigned", env=isolated)
    assert r.returncode == 0, r.stderr
    run = read_json(bundle_of(out) / "run.json")
    assert run["trust"]["signed"] is False and run["trust"]["allow_unsigned"] is True
    assert "not signed" in run["trust"]["note"] and run["flags"]["allow_unsigned"] is True


def test_busy_port_stops_the_run_naming_the_owner(tmp_path: Path, port: int, isolated: dict[str, str]) -> None:
    m = tiny_manifest(tmp_path / "t.yaml", port, levels=(1,), requests=4, repeats=1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        r = kit("run", str(m), "--out", str(tmp_path / "r"), "--allow-unsigned", env=isolated)
    assert r.returncode == 5
    assert str(port) in r.stderr and str(os.getpid()) in r.stderr


def _run_in_background(m: Path, out: Path, isolated: dict[str, str]) -> subprocess.Popen[str]:
    """`kit run` started as from a terminal: Ctrl-C raises KeyboardInterrupt (support.terminal)."""
    return popen_as_from_a_terminal([sys.executable, "-m", "kit", "run", str(m), "--out", str(out), "--allow-unsigned"],
                                    cwd=ROOT, env={**os.environ, **isolated}, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE)


def _wait_for_records(proc: subprocess.Popen[str], out: Path, n: int, timeout: float = 180.0) -> None:
    """Until the first cell's level-2 records file holds at least ``n`` requests; a run that ends first
    fails the test at once, with its output."""
    def enough() -> bool:
        if proc.poll() is not None:
            stdout, stderr = proc.communicate()
            raise AssertionError(f"kit run exited ({proc.returncode}) before {n} records:\n{stdout}{stderr}")
        files = list(out.glob("*/cells/baseline-r1/level-2/records.jsonl"))
        return bool(files) and len(files[0].read_text().splitlines()) >= n

    assert poll_until(enough, timeout, interval=0.05), f"no {n} records of baseline-r1 level 2 in {timeout:g} s"


def test_server_killed_mid_level_fails_the_cell_and_resume_completes(tmp_path: Path, port: int,
                                                                     isolated: dict[str, str]) -> None:
    m = tiny_manifest(tmp_path / "t.yaml", port, levels=(2,), requests=60, output_tokens=24, repeats=1)
    out = tmp_path / "r"
    proc = _run_in_background(m, out, isolated)
    try:
        _wait_for_records(proc, out, 10)
        state = Path(isolated["XDG_STATE_HOME"]) / "kit" / "servers"
        pgid = int(json.loads(next(state.glob("*.json")).read_text())["pgid"])
        os.killpg(pgid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 7, stdout + stderr
    assert "baseline-r1" in stderr and "--resume" in stderr
    b = bundle_of(out)
    cell = read_json(b / "cells/baseline-r1/cell.json")
    assert cell["status"] == "failed" and "exit code -9" in cell["reason"]
    assert "last log lines" in cell["reason"] and "kit-engine ready" in cell["reason"]
    kept = (b / "cells/baseline-r1/level-2/records.jsonl").read_text().splitlines()
    assert len(kept) >= 10
    assert all(json.loads(x)["rid"] for x in kept)  # every line is a complete record
    assert read_json(b / "run.json")["status"] == "failed"
    assert kit("verify", str(b), env=isolated).returncode == 0  # a failed run is still a consistent bundle

    r = kit("run", "--resume", str(b), "--allow-unsigned", env=isolated)  # flags never come from run.json
    assert r.returncode == 0, r.stdout + r.stderr
    assert read_json(b / "cells/baseline-r1/cell.json")["status"] == "ok"
    assert read_json(b / "cells/oea-r1/cell.json")["status"] == "ok"
    moved = b / "failed/baseline-r1-a1/level-2/records.jsonl"
    assert moved.read_text().splitlines() == kept  # nothing measured was lost
    run = read_json(b / "run.json")
    assert run["status"] == "complete" and len(run["resumed"]) == 1
    assert kit("verify", str(b), env=isolated).returncode == 0
    assert not list((Path(isolated["XDG_STATE_HOME"]) / "kit" / "servers").glob("*.json"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_leaves_a_resumable_bundle_and_no_server(tmp_path: Path, port: int, isolated: dict[str, str],
                                                           sig: signal.Signals) -> None:
    m = tiny_manifest(tmp_path / "t.yaml", port, levels=(2,), requests=80, output_tokens=24, repeats=1)
    out = tmp_path / "r"
    proc = _run_in_background(m, out, isolated)
    try:
        _wait_for_records(proc, out, 5)
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stdout + stderr
    assert "--resume" in stderr and "Traceback" not in stderr
    b = bundle_of(out)
    assert read_json(b / "run.json")["status"] == "interrupted"
    assert read_json(b / "cells/baseline-r1/cell.json")["status"] == "interrupted"
    assert not list((Path(isolated["XDG_STATE_HOME"]) / "kit" / "servers").glob("*.json"))
    assert port_bindable("127.0.0.1", port)
    assert kit("verify", str(b), env=isolated).returncode == 0
    r = kit("run", "--resume", str(b), "--allow-unsigned", env=isolated)  # flags never come from run.json
    assert r.returncode == 0, r.stderr
    assert read_json(b / "run.json")["status"] == "complete"


def test_resume_refuses_a_bundle_changed_since_it_was_signed(tmp_path: Path, port: int,
                                                            isolated: dict[str, str]) -> None:
    m = tiny_manifest(tmp_path / "t.yaml", port, levels=(1,), requests=4, repeats=1)
    out = tmp_path / "r"
    assert kit("run", str(m), "--out", str(out), "--allow-unsigned", env=isolated).returncode == 0
    b = bundle_of(out)
    rec = b / "cells/oea-r1/level-1/records.jsonl"
    data = rec.read_bytes()
    rec.write_bytes(data[:5] + bytes([data[5] ^ 1]) + data[6:])
    r = kit("run", "--resume", str(b), "--allow-unsigned", env=isolated)  # flags never come from run.json
    assert r.returncode == 9 and "cells/oea-r1/level-1/records.jsonl" in r.stderr
