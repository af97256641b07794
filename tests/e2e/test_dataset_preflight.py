"""`kit run` reads and checks the dataset before any server starts: a shipped manifest (experiments/workload-jsonl.yaml)
pointed at a hostile JSONL file (nesting too deep for the JSON parser, pinned by its real sha256) exits 3 with an
error naming the file and the line, and leaves no bundle and no server behind. Review 2 found this case exit 1
"internal error" after a server had started, the cell left "running"."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from e2e_helpers import ROOT, kit

pytestmark = pytest.mark.slow  # a `kit run`


def test_a_hostile_dataset_stops_kit_run_before_any_server(tmp_path: Path, isolated: dict[str, str]) -> None:
    data = b'{"prompt": "x", "a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"
    bad = tmp_path / "deep.jsonl"
    bad.write_bytes(data)
    text = (ROOT / "experiments" / "workload-jsonl.yaml").read_text()
    old = "file: {path: experiments/data/prompts-devil.jsonl, sha256: "
    assert old in text
    start = text.index(old)
    end = text.index("}", start)
    text = text[:start] + f"file: {{path: {bad}, sha256: {hashlib.sha256(data).hexdigest()}" + text[end:]
    m = tmp_path / "m.yaml"
    m.write_text(text)
    r = kit("run", "--allow-unsigned", str(m), "--out", str(tmp_path / "out"), env=isolated, timeout=120)
    assert r.returncode == 3, r.stdout[-2000:] + r.stderr[-2000:]
    assert "deep.jsonl" in r.stderr and "line 1 is nested deeper than the JSON parser allows" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    out = tmp_path / "out"
    assert not out.exists() or not any(out.rglob("server.log")), list(out.rglob("*"))
