"""Every odd file given as a manifest gets a fix, not only a diagnosis (an outside review, 2026-12-07: a directory,
an empty file, a binary or UTF-16 file and a tab in YAML each said what was wrong and nothing more)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli import main


@pytest.mark.parametrize(("name", "content", "fix"), [
    ("adir", None, "give a manifest file, e.g."),
    ("empty.yaml", b"", "start from experiments/demo.yaml"),
    ("bin.yaml", b"name: x\n\x00\x01\x02", "save it as UTF-8 text"),
    ("u16.yaml", "name: demo\n".encode("utf-16"), "iconv -f UTF-16 -t UTF-8"),
    ("latin1.yaml", "name: d\xe9mo\n".encode("latin-1"), "save it as UTF-8 text"),
    ("tab.yaml", b"name: x\n\tbad: 1\n", "indent with spaces"),
    ("colon.yaml", b"name: x\narms: [a, b\n", "fix the line named"),
])
def test_an_odd_manifest_file_gets_a_fix(tmp_path: Path, name: str, content: bytes | None, fix: str) -> None:
    path = tmp_path / name
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    r = CliRunner().invoke(main, ["validate", str(path)])
    assert r.exit_code == 3, r.output
    assert "Hint: " in r.output and fix in r.output, r.output
