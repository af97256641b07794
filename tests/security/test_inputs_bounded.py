"""Issue 9, bounded inputs: every bad input is a user error with the right exit code, read at most limit + 1
bytes, nesting limited in YAML and JSON, one exit code (2) for a missing file in every command."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli import main
from kit.errors import BundleError, ExitCode
from kit.files import read as reader
from kit.files.run import RunFile
from kit.signing import generate_key
from kit.stats.bundle import read_json, read_records
from kit.stats.requests import reduce_records


def _kit(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_dev_zero_is_refused_at_once() -> None:
    t0 = time.monotonic()
    code, out = _kit("validate", "/dev/zero")
    assert code == ExitCode.INVALID_MANIFEST, out
    assert "/dev/zero: cannot be read as a manifest file (not a regular file" in out
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("command", ["validate", "run", "plan", "verify", "sign"])
def test_missing_file_is_exit_2_in_every_command(command: str, tmp_path: Path, kit_home: Path) -> None:
    missing = tmp_path / "nope.yaml"
    extra = ["--key", str(generate_key(tmp_path / "k", "me@host").path)] if command == "sign" else []
    code, out = _kit(command, str(missing), *extra)
    assert code == ExitCode.USAGE, out
    assert f"{missing}: no such file" in out


def test_directory_fifo_and_proc_mem_are_invalid_manifests(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    cases = {str(tmp_path): "is a directory", str(fifo): "not a regular file (prw",
             "/proc/self/mem": "cannot be read as a manifest file"}
    for path, why in cases.items():
        code, out = _kit("validate", path)
        assert code == ExitCode.INVALID_MANIFEST, (path, out)
        assert why in out and "internal error" not in out, (path, out)


@pytest.mark.parametrize("opener", ["[", "{a: "])
def test_deep_yaml_names_the_nesting_limit(opener: str, tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text(opener * 10_000 + "\n")
    code, out = _kit("validate", str(deep))
    assert code == ExitCode.INVALID_MANIFEST, out
    assert "nested deeper than 32 levels (the nesting limit)" in out and "RecursionError" not in out


def test_non_utf8_manifest_names_the_encoding(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\u00e9\n".encode("latin-1"))
    code, out = _kit("validate", str(bad))
    assert code == ExitCode.INVALID_MANIFEST, out
    assert "not valid UTF-8" in out


def test_deep_json_in_a_bundle_is_a_bundle_error(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text("[" * 100_000)
    with pytest.raises(BundleError, match="nested too deeply"):
        read_json(plan)
    huge = tmp_path / "client.json"
    with huge.open("wb") as f:
        f.truncate(200 << 20)
    with pytest.raises(BundleError, match="larger than"):
        read_json(huge)


def test_records_stream_with_bounded_memory(tmp_path: Path) -> None:
    """20 MB of records (10 KB each) are reduced holding one line at a time, not the file and every dict."""
    rec = {"status": 500, "error": "E" * 10_000, "wall_start": 1.0, "e2e_ns": 1_000_000}
    path = tmp_path / "records.jsonl"
    line = json.dumps(rec) + "\n"
    with path.open("w") as f:
        for _ in range(2000):
            f.write(line)
        f.write("not json\n[1]\n")
    tracemalloc.start()
    stream = read_records(path)
    assert stream is not None
    lr = reduce_records(stream)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"\nrecords: {path.stat().st_size / 1e6:.1f} MB reduced with a peak of {peak / 1e6:.2f} MB")
    assert lr.requests == 2000 and lr.errors == 2000 and stream.unparsable == 2
    assert peak < 4 << 20


def test_typed_bundle_file_reads_are_bounded_and_depth_safe(tmp_path: Path) -> None:
    """kit.files.read.read_file (Bundle.read): deep nesting and oversize files are BundleErrors (exit 9)."""
    (tmp_path / "run.json").write_text("[" * 100_000)
    with pytest.raises(BundleError, match="nested too deeply") as deep:
        reader.read_file(tmp_path, "run.json", RunFile)
    assert deep.value.exit_code == ExitCode.BUNDLE_INVALID
    (tmp_path / "run.json").write_bytes(b" " * (reader.MAX_FILE_BYTES + 1))
    with pytest.raises(BundleError, match="larger than"):
        reader.read_file(tmp_path, "run.json", RunFile)
