"""What a review found on a fresh clone after `make demo` (2026-12-07): hints and documented commands that do not work
as written, and outputs that behave otherwise than documented.

- `kit run` whose config directory ($XDG_CONFIG_HOME/kit) is a file said "cannot write the key ...: File exists.
  Hint: choose a writable path with -o": `kit run` has no -o, and the cause is a file where a directory must be.
- `kit schema --bundle | head -c 10` exited 0, not 141 as `kit plan ... | head` does: the schema (170 kB) went out in
  one write, which the pipe took only part of before its reader left, and Python dropped the rest without an error.
- `kit schema -o /nonexist/dir/x.json` and `kit archive B -o /nonexist2/x.tar.gz` made the missing directories.
- README's `kit reproduce run.tar.gz` and docs/reproduce.md's --dry-run and --resume lines exit 4 as written: the demo
  manifest is signed by the repository's example key, which counts only with --trust allowed_signers.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli import main
from kit.errors import ExitCode

ROOT = Path(__file__).resolve().parent.parent


def _options(command: str) -> set[str]:
    return {o for p in main.commands[command].params for o in (*p.opts, *p.secondary_opts)}


def test_a_config_directory_that_is_a_file_is_named_with_a_fix_kit_run_has(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kit").write_text("not a directory\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    r = CliRunner().invoke(main, ["run", "--trust", str(ROOT / "allowed_signers"), "--out", str(tmp_path / "out"),
                                  str(ROOT / "experiments/demo.yaml")])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert f"{tmp_path / 'kit'} is not a directory" in r.output and "File exists" not in r.output, r.output
    hint = r.output.split("Hint: ", 1)[1]
    assert set(re.findall(r"(?<![\w-])--?[a-z][\w-]*", hint.split("`kit keygen")[0])) <= _options("run"), hint
    assert "--key FILE" in hint and "`kit keygen -o FILE`" in hint
    assert "-o" in _options("keygen") and (tmp_path / "kit").read_text() == "not a directory\n"
    assert not (tmp_path / "out").exists()  # refused before any bundle


def test_output_cut_short_by_its_reader_ends_with_141_however_large() -> None:
    """The reader reads a little, then goes away while kit still writes (170 kB against a 64 kB pipe)."""
    p = subprocess.Popen([sys.executable, "-m", "kit", "schema", "--bundle"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT)
    assert p.stdout is not None and p.stdout.read(10) == b'{\n  "$sche'
    p.stdout.close()
    _, err = p.communicate(timeout=60)
    assert p.returncode == ExitCode.BROKEN_PIPE == 141, err
    assert err == b""


def test_whole_outputs_are_unchanged_by_being_written_in_pieces() -> None:
    r = CliRunner().invoke(main, ["schema", "--bundle"])
    assert r.exit_code == 0 and r.output == (ROOT / "bundle.schema.json").read_text()


@pytest.mark.parametrize("command", [["schema", "--bundle"], ["compose", str(ROOT / "experiments/demo.yaml")],
                                     ["archive", "BUNDLE"]])
def test_dash_o_in_a_missing_directory_is_refused_naming_it(tmp_path: Path, command: list[str]) -> None:
    command = [str(tmp_path) if word == "BUNDLE" else word for word in command]  # refused before it is read
    missing = tmp_path / "nonexist" / "dir"
    r = CliRunner().invoke(main, [*command, "-o", str(missing / "x.tar.gz")])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert f"its directory {missing} does not exist; create it first (mkdir -p {missing})" in r.output
    assert not (tmp_path / "nonexist").exists()
    (tmp_path / "file").write_text("x")
    r = CliRunner().invoke(main, [*command, "-o", str(tmp_path / "file" / "x.tar.gz")])
    assert r.exit_code == ExitCode.USAGE and f"{tmp_path / 'file'} is not a directory" in r.output, r.output


def test_keygen_still_makes_the_directory_of_its_key(tmp_path: Path) -> None:
    """As for its default (~/.config/kit/id_ed25519): README's `kit keygen -o ~/.ssh/kit_ed25519` on a machine
    without ~/.ssh; its help says so."""
    r = CliRunner().invoke(main, ["keygen", "-o", str(tmp_path / "new" / "k"), "-C", "me@lab"])
    assert r.exit_code == 0 and (tmp_path / "new" / "k.pub").is_file(), r.output


def _commands(doc: Path) -> list[tuple[int, list[str]]]:
    lines = doc.read_text().splitlines()
    return [(n, shlex.split(line.split(" #", 1)[0].removeprefix("$ "))) for n, line in enumerate(lines, 1)
            if re.match(r"(\$ )?kit (run|reproduce)\b", line)]


@pytest.mark.parametrize("doc", ["README.md", "docs/reproduce.md"])
def test_the_documented_runs_of_the_demo_give_the_trust_it_needs(doc: str) -> None:
    """Their examples run the demo (experiments/demo.yaml, or a bundle or archive of it), signed by the example key:
    without --trust allowed_signers (or --allow-unsigned), each exits 4 as written."""
    commands = _commands(ROOT / doc)
    assert commands
    for n, argv in commands:
        assert {"--trust", "--trust-only", "--allow-unsigned"} & set(argv), f"{doc}:{n}: {shlex.join(argv)}"


def test_a_missing_trust_file_says_what_one_is(tmp_path: Path) -> None:
    """A review: `--trust /nonexist` was exit 2 with no hint."""
    demo = Path(__file__).resolve().parents[1] / "experiments" / "demo.yaml"
    r = CliRunner().invoke(main, ["verify", "--trust", str(tmp_path / "nonexist"), str(demo)])
    assert r.exit_code == ExitCode.USAGE, r.output
    assert f"trust file {tmp_path / 'nonexist'} does not exist" in r.output
    assert "Hint: check the path (a relative one is taken from where kit runs)" in r.output, r.output
