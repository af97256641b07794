"""`kit verify` of a bundle without provenance (kit.verify, kit.hints.finish_hint): a run in progress is said to be
one, whose, with no resume command; a run that never ended gets the command that finishes it as its run would have
printed it, from its signed run.json (--allow-* as recorded, `kit reproduce SOURCE --resume` for a reproduction).
The commands are parsed by kit's own CLI as printed; tests/security/test_verify_hints.py pastes them after real
runs. Before, every such bundle got a bare `kit run --resume DIR` (with only the check's trust flags)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from kit.bundle import Bundle, Checkpointer
from kit.bundle.checkpoints import Chain
from kit.bundle.verify import verify_directory
from kit.cli import main
from kit.errors import BundleError, ExitCode
from kit.signing import SigningKey, user_trust_file
from kit.verify import verify_target

ROOT = Path(__file__).resolve().parents[2]


def _killed(tmp_path: Path, runner: SigningKey, run: dict[str, Any], name: str = "exp") -> Bundle:
    """A bundle whose kit was killed after its start checkpoint and one cell: ``run`` is its signed run.json."""
    b = Bundle.create(tmp_path / "results", name, run_id="abc123")
    b.write_bytes("manifest.yaml", b"name: exp\n")
    b.write_json("run.json", {"run_id": "abc123", "status": "running", **run})
    chk = Checkpointer(b, runner, Chain())
    chk.sign("start")
    b.write_json("cells/base-r1/cell.json", {"id": "base-r1", "arm": "base", "repeat": 1, "index": 0, "status": "ok"})
    chk.sign("cell", cell="base-r1", status="ok")
    return b


def _hint(target: Path, trust: list[Path]) -> tuple[str, str]:
    """What `kit verify` says of ``target``: the problem and the hint (exit 9)."""
    with pytest.raises(BundleError) as e:
        verify_target(target, trust)
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    return e.value.message, e.value.hint or ""


def _command(hint: str) -> list[str]:
    [command] = [part for part in hint.split("`")[1::2] if part.startswith("kit ")]
    return shlex.split(command)


def _parsed(argv: list[str]) -> dict[str, Any]:
    """The printed command as kit's CLI parses it (paths must exist: click checks them)."""
    top = click.Context(main, info_name="kit", **main.context_settings)
    return main.commands[argv[1]].make_context(argv[1], argv[2:], parent=top).params


def test_a_killed_run_started_with_allow_unsigned_gets_a_resume_with_it(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    """Defect 1 of the review: the resume verify printed lacked --allow-unsigned, which the resume needs (exit 4)."""
    b = _killed(tmp_path, runner, {"argv": ["kit", "run", "--allow-unsigned", "m.yaml", "--allow-unpinned"],
                                   "flags": {"allow_unsigned": True, "allow_unpinned": True}})
    problem, hint = _hint(b.root, [trust_file])
    assert "missing file: provenance.dsse.json" in problem
    argv = _command(hint)
    assert argv == ["kit", "run", "--resume", str(b.root.resolve()), "--trust-only", str(trust_file.resolve()),
                    "--allow-unsigned", "--allow-unpinned"], hint
    assert "as its signed run.json records" in hint
    params = _parsed(argv)
    assert params["allow_unsigned"] and params["allow_unpinned"] and params["resume"] == b.root.resolve()


def test_the_flags_come_from_the_signed_run_json_not_the_file_on_disk(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    b = _killed(tmp_path, runner, {"argv": ["kit", "run", "m.yaml"], "flags": {"allow_unsigned": False}})
    b.write_json("run.json", {"run_id": "abc123", "argv": ["kit", "reproduce", "/elsewhere"],
                              "flags": {"allow_unsigned": True}})  # after the last checkpoint: no one vouches
    argv = _command(_hint(b.root, [trust_file])[1])
    assert argv == ["kit", "run", "--resume", str(b.root.resolve()), "--trust-only", str(trust_file.resolve())]


def test_a_killed_reproduction_gets_kit_reproduce_source_resume(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    """Defect 3: `kit reproduce SOURCE --resume NEW` with the source as run.json's argv gave it (relative to the
    directory it ran in, which the bundle's place under --out tells), --until-decided from its flags."""
    source = tmp_path / "shared" / "src-bundle"
    source.mkdir(parents=True)
    b = _killed(tmp_path, runner, {
        "argv": ["kit", "reproduce", "shared/src-bundle", "--allow-untrusted-source", "--out=results",
                 "--until-decided", "--allow-unsigned"],
        "flags": {"allow_unsigned": True, "allow_unpinned": False, "until_decided": True},
        "manifest_source": str(tmp_path / "reproduce-source.yaml")})
    user_trust_file().parent.mkdir(parents=True, exist_ok=True)
    user_trust_file().write_text(trust_file.read_text())  # the runner's line, as kit adds it for its own key
    hint = _hint(b.root, [])[1]
    argv = _command(hint)
    assert argv == ["kit", "reproduce", str(source), "--resume", str(b.root.resolve()), "--allow-untrusted-source",
                    "--until-decided", "--allow-unsigned"], hint
    assert "kit run --resume" not in hint and "if the source bundle has moved since" in hint
    params = _parsed(argv)
    assert params["source"] == source and params["until_decided"] and params["allow_untrusted_source"]
    assert params["allow_unsigned"] and params["resume"] == b.root.resolve()


def test_a_reproduction_whose_source_moved_or_whose_directory_is_unknown_says_so(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    gone = tmp_path / "gone"
    b = _killed(tmp_path, runner, {"argv": ["kit", "reproduce", str(gone), "--out", str(tmp_path / "results")]})
    hint = _hint(b.root, [trust_file])[1]
    assert _command(hint)[:3] == ["kit", "reproduce", str(gone)] and f"nothing is at {gone} now" in hint
    # relative, and moved since (no --out suffix matches; --project: no manifest_source tells the directory)
    c = _killed(tmp_path / "moved", runner, {"argv": ["kit", "reproduce", "src", "--out", "far/away",
                                                      "--project", "proj", "--key", "k"]})
    hint = _hint(c.root, [trust_file])[1]
    assert _command(hint)[:3] == ["kit", "reproduce", "src"] and "which the record does not tell" in hint
    assert "it ran with --project proj" in hint and "it ran with --key k" in hint and "--key" not in _command(hint)


def test_the_key_a_run_signed_with_is_given_again(tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    b = _killed(tmp_path, runner, {"argv": ["kit", "run", "m.yaml", "--key", "keys/runner_ed25519"],
                                   "manifest_source": str(tmp_path / "m.yaml")})
    argv = _command(_hint(b.root, [trust_file])[1])
    assert argv[-2:] == ["--key", str(tmp_path / "keys" / "runner_ed25519")]


def test_a_policy_that_does_not_vouch_for_the_runner_gets_the_users_file_or_no_command(
        tmp_path: Path, runner: SigningKey, trust_file: Path, stranger: SigningKey) -> None:
    b = _killed(tmp_path, runner, {"argv": ["kit", "run", "m.yaml"]})
    other = tmp_path / "other"
    other.write_text(f'x namespaces="kit-bundle" {stranger.public_line()}\n')
    hint = _hint(b.root, [other])[1]
    assert "`" not in hint and "a resume would refuse it" in hint  # nothing to paste that would be refused
    user_trust_file().parent.mkdir(parents=True, exist_ok=True)
    user_trust_file().write_text(trust_file.read_text())
    argv = _command(_hint(b.root, [other])[1])  # as kit run adds it: the user's own file vouches for the runner
    assert argv[4:] == ["--trust-only", str(other.resolve()), "--trust-only", str(user_trust_file().resolve())]


def test_a_bundle_a_kit_process_is_writing_is_a_run_in_progress(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    """Defect 2: verify of a bundle whose lock a live kit holds printed `kit run --resume`, which exits 2 (in use).
    Another process holds the lock here as `kit run` does (kit.experiment.session.lock); tests/security pastes
    after a real run, whose owner it names."""
    b = _killed(tmp_path, runner, {"argv": ["kit", "run", "--allow-unsigned", "m.yaml"],
                                   "flags": {"allow_unsigned": True}})
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from pathlib import Path; "
                               "from kit.experiment.session import lock; lock(Path(sys.argv[1])); print('held', "
                               "flush=True); time.sleep(120)", str(b.root)],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        problem, hint = _hint(b.root, [trust_file])
        assert "a run in progress" in problem and "is writing it now" in problem, problem
        assert "--resume" not in hint and "`" not in hint and "when that run has ended" in hint, hint
    finally:
        holder.kill()
        holder.wait()
    assert "--allow-unsigned" in _command(_hint(b.root, [trust_file])[1])  # its kit gone: the command again


def test_without_kit_verify_an_unsealed_bundle_is_sent_to_it(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    """`kit report` (kit.bundle.resume.verify_integrity) knows neither the lock's owner nor the run's flags: it
    names `kit verify DIR`, which says which and prints the command."""
    b = _killed(tmp_path, runner, {"flags": {"allow_unsigned": True}})
    odd = b.root.rename(b.root.with_name("a dir; with 'quotes'"))
    with pytest.raises(BundleError) as e:
        verify_directory(odd, [trust_file], label=str(odd))
    assert _command(e.value.hint or "") == ["kit", "verify", str(odd.resolve())]


def test_recorded_command_lines_are_read_as_the_cli_reads_them() -> None:
    from kit.hints import Invocation  # here: the other tests run against a kit without it (they failed there)

    inv = Invocation.of(["kit", "--debug", "reproduce", "--out=o", "--trust", "t", "--allow-unsigned", "s", "--",
                         "-odd"])
    assert (inv.command, inv.args, inv.options, inv.flags) == (
        "reproduce", ["s", "-odd"], {"--out": "o", "--trust": "t"}, {"--allow-unsigned"})
    assert Invocation.of(["kit"]).command is None
    assert os.sep == "/"  # the paths above are POSIX ones


def test_kit_reproduce_of_an_unsealed_source_names_the_source_not_its_private_copy(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    """kit reproduce verifies a copy of the source in a temp directory it removes: the hint named that copy."""
    from kit.reproduce.source import opened

    b = _killed(tmp_path, runner, {"flags": {"allow_unsigned": True}})
    with pytest.raises(BundleError) as e, opened(b.root, [trust_file], allow_untrusted=False):
        pass
    assert _command(e.value.hint or "") == ["kit", "verify", str(b.root.resolve())]


def test_a_killed_run_of_a_manifest_its_trust_file_approved_gets_that_file_again(
        tmp_path: Path, runner: SigningKey, trust_file: Path, stranger: SigningKey) -> None:
    """A review on a fresh clone: `kit verify` of a killed `kit run --trust allowed_signers experiments/demo.yaml`
    (no --trust: the user's own file trusts the runner) printed `kit run --resume B`, which exits 4 pasted: the
    resume checks the manifest again, and only the repo's allowed_signers approves the example key. The printed
    command gives that file, as the run's recorded command line did, and under its policy both the manifest and the
    checkpoints verify, as the resume checks them."""
    from kit.bundle.checkpoints import read_chain
    from kit.signing import policy_files, sign_manifest, verify_manifest
    from kit.signing.trust import trust_policy

    signers = tmp_path / "allowed_signers"
    signers.write_text(f'kit-example namespaces="kit-manifest" {stranger.public_line()}\n')
    user_trust_file().parent.mkdir(parents=True, exist_ok=True)
    user_trust_file().write_text(trust_file.read_text())  # as kit run leaves it: the runner trusted for kit-bundle
    b = Bundle.create(tmp_path / "results", "demo", run_id="abc123")
    b.write_bytes("manifest.yaml", b"name: demo\n")
    sign_manifest(b.root / "manifest.yaml", b"name: demo\n", stranger)
    b.write_json("run.json", {"run_id": "abc123", "status": "running", "manifest_source": str(tmp_path / "demo.yaml"),
                              "argv": ["kit", "run", "--trust", "allowed_signers", "demo.yaml"]})
    Checkpointer(b, runner, Chain()).sign("start")
    argv = _command(_hint(b.root, [])[1])
    assert argv == ["kit", "run", "--resume", str(b.root.resolve()), "--trust", str(signers.resolve())], argv
    params = _parsed(argv)
    policy = policy_files(trust_policy(params["trust"], params["trust_only"]))
    verify_manifest(b.root / "manifest.yaml", b"name: demo\n", policy)  # the resume's check of the manifest
    assert read_chain(b.root, policy).run_json is not None  # and of the checkpoints
    signers.unlink()  # no longer where it ran: no command that would be refused, but what to add
    hint = _hint(b.root, [])[1]
    assert hint.endswith(f"add --trust FILE, the allowed_signers file that does (its run was given {signers})"), hint
