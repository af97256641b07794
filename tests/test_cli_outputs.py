"""What kit writes where the user says, and what it shows of what others wrote (an outside review, 2026-12-07).

``kit archive B -o /dev/full`` replaced the device with a 1.4 MB file (kit writes beside the target and renames over
it); ``-o`` a link to ``/proc/self/fd/1`` swapped the link for a file; ``--out /dev/null`` was "internal error:
FileExistsError". A manifest key or a bundle's environment holding ``ESC ] 0 ;`` set the reader's window title. A
named pipe stands for a device here: a test that fails must not replace a real one on the machine running it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli import main
from kit.errors import UsageError
from kit.plumbing.files import atomic_write
from kit.plumbing.printable import printable
from kit.signing import generate_key

ROOT = Path(__file__).resolve().parent.parent


def _odd(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "dir").mkdir()
    return {"a named pipe": fifo, "a symbolic link": link, "a directory": tmp_path / "dir"}


@pytest.mark.parametrize("command", [["schema", "-o"], ["compose", str(ROOT / "experiments/demo.yaml"), "-o"],
                                     ["keygen", "-o"]])
def test_dash_o_refuses_what_is_no_regular_file(tmp_path: Path, command: list[str]) -> None:
    for what, path in _odd(tmp_path).items():
        before = os.lstat(path).st_mode
        r = CliRunner().invoke(main, [*command, str(path)])
        assert r.exit_code == 2, r.output
        assert f"{path}' {what.replace('a ', 'is a ', 1)}" in r.output if what == "a directory" else (
            f"{path} is {what}: kit writes only regular files" in r.output)  # click's own check for a directory
        assert os.lstat(path).st_mode == before  # still the pipe, the link, the directory
    r = CliRunner().invoke(main, ["schema", "-o", str(tmp_path / "new.json")])
    assert r.exit_code == 0 and (tmp_path / "new.json").stat().st_size > 0, r.output


def test_out_must_be_or_become_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    manifest = str(ROOT / "experiments/demo.yaml")
    r = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "file"), manifest])
    assert r.exit_code == 2 and f"{tmp_path / 'file'}' is a file" in r.output  # click's own check
    r = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "file" / "sub"), manifest])
    assert r.exit_code == 2 and f"cannot be made: {tmp_path / 'file'} is a file" in r.output
    r = CliRunner().invoke(main, ["run", "--out", str(_odd(tmp_path)["a named pipe"]), manifest])
    assert r.exit_code == 2 and "is a named pipe, not a directory" in r.output


def test_the_atomic_writer_never_replaces_a_pipe_or_a_directory(tmp_path: Path) -> None:
    odd = _odd(tmp_path)
    for what in ("a named pipe", "a directory"):
        with pytest.raises(OSError, match="not a regular file"):
            atomic_write(odd[what], b"data")
    assert stat.S_ISFIFO(os.lstat(odd["a named pipe"]).st_mode) and odd["a directory"].is_dir()
    atomic_write(odd["a symbolic link"], b"data")  # a link is replaced, never followed (bundle files)
    assert not odd["a symbolic link"].is_symlink() and not (tmp_path / "elsewhere").exists()


def test_keygen_never_writes_through_a_link_nor_over_a_public_key(tmp_path: Path) -> None:
    (tmp_path / "k.pub").write_text("someone's\n")
    with pytest.raises(UsageError, match=r"k\.pub already exists"):
        generate_key(tmp_path / "k", "me@lab")
    assert (tmp_path / "k.pub").read_text() == "someone's\n" and not (tmp_path / "k").exists()
    (tmp_path / "j").symlink_to(tmp_path / "target")  # dangling: Path.exists() said no
    with pytest.raises(UsageError, match="j already exists"):
        generate_key(tmp_path / "j", "me@lab")
    assert not (tmp_path / "target").exists()
    with pytest.raises(UsageError, match="control character"):
        generate_key(tmp_path / "c", "me\x1b]0;title\x07")


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable("a\tb\nc") == "a\tb\nc"
    assert printable("\x1b]0;PWNED\x07\x1b[2J\rx\x7f\x9b") == "\\x1b]0;PWNED\\x07\\x1b[2J\\x0dx\\x7f\\x9b"
    assert printable("abc\u202edef\u2066") == "abc\\u202edef\\u2066"
    assert printable("naïve ü 日本") == "naïve ü 日本"


def test_a_manifest_key_with_escapes_is_shown_escaped(tmp_path: Path) -> None:
    bad = tmp_path / "ansi.yaml"
    bad.write_text((ROOT / "experiments/demo.yaml").read_text() + '"\\e]0;PWNED\\a\\e[31mevil": 1\n')
    r = CliRunner().invoke(main, ["validate", str(bad)])
    assert r.exit_code == 3, r.output
    assert "\x1b" not in r.output and "\x07" not in r.output
    assert "\\x1b]0;PWNED\\x07" in r.output


def test_json_commands_print_one_json_document_on_failure_too(tmp_path: Path) -> None:
    import json

    r = CliRunner().invoke(main, ["plan", "--json", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and "missing.yaml: no such file" in doc["error"]
    assert "Error:" in r.stderr  # the words as ever, on stderr
    r = CliRunner().invoke(main, ["plan", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and r.stdout == ""


def test_an_earlier_commands_json_does_not_silence_the_next_ones_error(tmp_path: Path) -> None:
    """One process, two commands (a library caller, the tests): the first's --json output must not count as the
    second's (it failed in `make unit` after another test's --json command, alone it passed)."""
    import json

    assert CliRunner().invoke(main, ["plan", "--json", str(ROOT / "experiments/demo.yaml")]).exit_code == 0
    r = CliRunner().invoke(main, ["plan", "--json", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2 and json.loads(r.stdout)["ok"] is False, r.stdout


def test_review_findings_on_outputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh-eyes review (2026-12-07): keygen without USER for a uid the password database lacks (a container's
    -u 12345) ended in "internal error: KeyError"; --out a dangling link was "internal error: FileExistsError"; a
    click usage error under --json printed no JSON."""
    import getpass
    import json

    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 12345")

    monkeypatch.setattr(getpass, "getuser", no_user)
    r = CliRunner().invoke(main, ["keygen", "-o", str(tmp_path / "k")])
    assert r.exit_code == 0 and " user@" in (tmp_path / "k.pub").read_text(), r.output
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    r = CliRunner().invoke(main, ["run", "--out", str(tmp_path / "dangling"), str(ROOT / "experiments/demo.yaml")])
    assert r.exit_code == 2 and "is a symbolic link to no directory" in r.output, r.output
    r = CliRunner().invoke(main, ["compare", "--json", str(tmp_path / "missing"), str(tmp_path)])
    assert r.exit_code == 2, r.output
    doc = json.loads(r.stdout)
    assert doc["ok"] is False and doc["exit_code"] == 2 and "does not exist" in doc["error"]


def test_a_closed_stderr_is_no_crash(tmp_path: Path) -> None:
    """A review: with fd 2 closed (`kit run M 2>&-`, a daemon) the progress console wrapped sys.stderr, None, and
    every `kit run` and `kit reproduce` was an internal error (exit 1) at its start; it is the error of its input."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "kit", "run", str(tmp_path / "nothing.yaml")], stdout=subprocess.PIPE,
                       text=True,
                       timeout=120, check=False, preexec_fn=lambda: os.close(2), cwd=ROOT)
    assert r.returncode == 2, (r.returncode, r.stdout)  # no such manifest: usage, as with stderr open
