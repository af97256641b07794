from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from kit.bundle import Bundle
from kit.errors import BundleError, ExitCode


def test_create_names_the_directory(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path / "results", "demo")
    assert b.root.parent == tmp_path / "results"
    assert re.fullmatch(r"demo-\d{8}T\d{6}Z-[0-9a-f]{6}", b.root.name)
    assert b.root.name.endswith("-" + b.run_id)
    assert b.root.is_dir() and not any(b.root.iterdir())


def test_create_with_given_run_id_and_refusals(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo", run_id="abc123")
    assert b.run_id == "abc123" and b.root.name.endswith("-abc123")
    for bad in ("../x", "a/b", "", ".."):
        with pytest.raises(BundleError):
            Bundle.create(tmp_path, bad)
        with pytest.raises(BundleError):
            Bundle.create(tmp_path, "demo", run_id=bad or "a\\b")


@pytest.mark.parametrize("rel", ["/etc/passwd", "../x", "a/../b", "a//b", "./a", "a/./b", "", "a\\b", "a\x00b",
                                 "a/", "cells/x\n"])
def test_path_refuses_unsafe(tmp_path: Path, rel: str) -> None:
    b = Bundle.create(tmp_path, "demo")
    with pytest.raises(BundleError) as e:
        b.path(rel)
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID


def test_write_json_layout_and_atomicity(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    p = b.write_json("a/b.json", {"z": 1, "a": [1, 2], "é": "µ"})
    text = p.read_text(encoding="utf-8")
    assert text == '{\n  "a": [\n    1,\n    2\n  ],\n  "z": 1,\n  "é": "µ"\n}\n'
    b.write_json("a/b.json", {"new": True})
    assert json.loads(p.read_text()) == {"new": True}
    assert sorted(os.listdir(p.parent)) == ["b.json"]  # no temp files left behind
    with pytest.raises(ValueError):
        b.write_json("nan.json", {"x": float("nan")})
    assert not (b.root / "nan.json").exists()
    assert sorted(os.listdir(b.root)) == ["a"]


def test_write_bytes_and_append_jsonl(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    assert b.write_bytes("x.bin", b"\x00\x01").read_bytes() == b"\x00\x01"
    b.append_jsonl("cells/a-r1/gates.jsonl", {"b": 2, "a": 1})
    b.append_jsonl("cells/a-r1/gates.jsonl", {"phase": "after"})
    assert b.path("cells/a-r1/gates.jsonl").read_text() == '{"a":1,"b":2}\n{"phase":"after"}\n'


def test_cell_dir_and_move_failed_attempt(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    for n in (1, 2):
        d = b.cell_dir("oea-r2")
        assert d == b.root / "cells" / "oea-r2" and d.is_dir()
        b.write_bytes("cells/oea-r2/level-16/records.jsonl", f"attempt {n}\n".encode())
        moved = b.move_failed_attempt("oea-r2")
        assert moved == b.root / "failed" / f"oea-r2-a{n}"
        assert (moved / "level-16" / "records.jsonl").read_text() == f"attempt {n}\n"
        assert not (b.root / "cells" / "oea-r2").exists()
    with pytest.raises(BundleError):
        b.move_failed_attempt("oea-r2")  # nothing to move
    with pytest.raises(BundleError):
        b.cell_dir("../escape")


def test_files_sorted_posix_and_excludes_provenance(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    for rel in ("z.txt", "a/b/c.txt", "a-b.txt", "provenance.dsse.json", "a/ä.txt"):
        b.write_bytes(rel, b"x")
    (b.root / "empty").mkdir()
    assert b.files() == ["a-b.txt", "a/b/c.txt", "a/ä.txt", "z.txt"]
    b.remove_provenance()
    assert not (b.root / "provenance.dsse.json").exists()
    b.remove_provenance()  # idempotent


def test_files_refuses_symlinks_and_special_files(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    b.write_bytes("ok.txt", b"x")
    (b.root / "link").symlink_to(b.root / "ok.txt")
    with pytest.raises(BundleError, match="link: is a symbolic link"):
        b.files()
    (b.root / "link").unlink()
    os.mkfifo(b.root / "fifo")
    with pytest.raises(BundleError, match="fifo: is a special file"):
        b.files()


def test_open_refuses_non_bundles(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="not a directory"):
        Bundle.open(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match=re.escape("no run.json")):
        Bundle.open(tmp_path / "empty")
    (tmp_path / "empty" / "run.json").write_text("[1, 2]")
    with pytest.raises(BundleError, match="run_id"):
        Bundle.open(tmp_path / "empty")
    (tmp_path / "empty" / "run.json").write_text("{not json")
    with pytest.raises(BundleError, match="unreadable"):
        Bundle.open(tmp_path / "empty")


def test_open_for_resume_drops_stale_temp_files(tmp_path: Path) -> None:
    b = Bundle.create(tmp_path, "demo")
    b.write_json("run.json", {"run_id": b.run_id, "status": "interrupted"})
    stale = b.root / "cells" / "a-r1" / ".cell.json.tmp-123-0123abcd"
    stale.parent.mkdir(parents=True)
    stale.write_text("{")
    b.write_bytes("cells/a-r1/keep.tmp-1", b"a result that merely looks odd")
    again = Bundle.open(b.root)
    assert again.run_id == b.run_id
    assert not stale.exists()
    assert again.files() == ["cells/a-r1/keep.tmp-1", "run.json"]
