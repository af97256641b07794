"""A process-runtime manifest whose server program this host does not have is refused before the run (exit 3), as a
missing model.path is: it failed every cell, one after the other (an outside review, 2026-12-07)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.manifests import manifest_data, manifest_yaml

from kit.cli import main


@pytest.mark.parametrize(("command", "said"), [
    (["no-such-server-anywhere", "--port", "{port}"], "'no-such-server-anywhere' is not on the PATH its server gets"),
    (["./bin/missing.sh"], "'./bin/missing.sh' ("),
    (["./bin/not-executable.sh"], "is no executable file on this host"),
])
def test_a_missing_server_program_is_named_before_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          command: list[str], said: str) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "not-executable.sh").write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "m.yaml"
    path.write_bytes(manifest_yaml(manifest_data("t", command=command)))
    for args in (["validate", str(path)], ["run", "--allow-unsigned", "--out", str(tmp_path / "r"), str(path)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 3, r.output
        assert said in r.output and "the process runtime starts it here" in r.output
    assert not (tmp_path / "r").exists()  # refused before any bundle


def test_a_program_that_is_here_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "serve.sh").write_text("#!/bin/sh\n")
    (tmp_path / "serve.sh").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    for command in (["./serve.sh"], ["sh", "-c", "true"], ["{python}", "-m", "kit.engine"]):
        path = tmp_path / "m.yaml"
        path.write_bytes(manifest_yaml(manifest_data("t", command=command)))
        r = CliRunner().invoke(main, ["validate", str(path)])
        assert r.exit_code == 0, (command, r.output)


def test_the_program_each_arm_runs_is_looked_up_as_its_server_would(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh-eyes review of the check above: a program on the PATH the manifest gives its server was refused (the
    shim looks it up there), and server.command[0] was checked where every arm runs its own command."""
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "myserve").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "myserve").chmod(0o755)
    monkeypatch.chdir(tmp_path)
    own_path = manifest_data("t", command=["myserve", "--port", "{port}"],
                             server={"env": {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin"}})
    overridden = manifest_data("t", command=["not-installed-anywhere"], arms=[
        {"name": "a", "command": ["{python}", "-m", "kit.engine"]}, {"name": "b", "command": ["sh", "-c", "true"]}])
    for data in (own_path, overridden):
        path = tmp_path / "m.yaml"
        path.write_bytes(manifest_yaml(data))
        r = CliRunner().invoke(main, ["validate", str(path)])
        assert r.exit_code == 0, r.output


def test_a_home_relative_program_is_checked_and_started_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import subprocess

    from kit.manifest import load_manifest
    from kit.manifest.hostpaths import missing_programs
    from kit.runtime.subreaper import spawn

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "hi").write_text("#!/bin/sh\necho hi\n")
    (tmp_path / "bin" / "hi").chmod(0o755)
    path = tmp_path / "m.yaml"
    path.write_bytes(manifest_yaml(manifest_data("t", command=["~/bin/hi"])))
    assert missing_programs(load_manifest(path).manifest) == []
    proc, _ = spawn(["~/bin/hi"], {"PATH": os.environ["PATH"]}, stdout=subprocess.PIPE, cwd="/")
    assert proc.communicate(timeout=10)[0] == b"hi\n"
