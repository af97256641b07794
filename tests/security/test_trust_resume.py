"""Issue 9: `kit run --resume` launders nothing.

It requires a bundle whose provenance verifies as TRUSTED for kit-bundle (deleting provenance.dsse.json
from a tampered bundle used to get it re-signed as trusted), re-checks the manifest signature under the
current policy, and never takes allow_unsigned/allow_unpinned from the bundle's run.json. Every resume
here passes a runner key that does not exist: the old code, having accepted the bundle, stopped there
(exit 2) instead of refusing it; nothing is ever run."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from trust_helpers import PROV, bundle, forge, key, resign, set_run_flags, trust_user

from kit.bundle import Bundle
from kit.cli import main
from kit.experiment import RunOptions
from kit.experiment.inputs import load_for_run
from kit.signing import NS_BUNDLE, SigningKey, sign_manifest


def _resume(b: Bundle, tmp: Path, *extra: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["run", "--resume", str(b.root), "--key", str(tmp / "no-such-key"), *extra])
    return r.exit_code, r.output


def _trusted_bundle(tmp: Path) -> tuple[Bundle, SigningKey]:
    runner = key(tmp, "runner", "kit-runner@lab-host")
    trust_user(runner, NS_BUNDLE, "kit-runner@lab-host")
    return bundle(tmp, runner), runner


def test_resume_refuses_a_tampered_bundle_whose_provenance_was_deleted(tmp_path: Path, kit_home: Path) -> None:
    b, _ = _trusted_bundle(tmp_path)
    rec = b.root / "cells" / "oea-r1" / "level-1" / "records.jsonl"
    rec.write_text(rec.read_text().replace('"status": 500', '"status": 200'))
    b.remove_provenance()
    code, out = _resume(b, tmp_path, "--allow-unsigned")
    assert code == 9, out
    assert f"missing file: {PROV}" in out and "nobody vouches for its files" in out
    assert "kit resumes only bundles whose signed provenance verifies as trusted" in out
    assert not (b.root / PROV).exists()


def test_resume_refuses_a_bundle_signed_by_an_untrusted_key(tmp_path: Path, kit_home: Path) -> None:
    b, runner = _trusted_bundle(tmp_path)
    forge(b, key(tmp_path, "forger", runner.comment))  # a look-alike comment proves nothing
    code, out = _resume(b, tmp_path, "--allow-unsigned")
    assert code == 9, out
    assert out.startswith(f"Error: UNTRUSTED: bundle {b.root} is signed by "), out


def test_resume_never_takes_allow_unsigned_from_run_json(tmp_path: Path, kit_home: Path) -> None:
    """A trusted colleague's bundle, run with --allow-unsigned; its manifest was edited before it was sealed."""
    b, runner = _trusted_bundle(tmp_path)
    b.path("manifest.yaml.sig").unlink()
    m = b.path("manifest.yaml")
    m.write_text(m.read_text().replace('command: ["{python}"', 'command: ["sh", "-c", "id > pwned", "{python}"'))
    set_run_flags(b, allow_unsigned=True, allow_unpinned=True)
    resign(b, runner)
    code, out = _resume(b, tmp_path)
    assert code == 4, out
    assert "started without a signature" in out and "never takes --allow-unsigned from the bundle's run.json" in out
    assert not list(tmp_path.rglob("pwned"))
    # the message names the bytes it checked (the bundle's copy, not the file the run started from, which may be
    # gone or changed), and the hint is one that can work: signing a file now changes nothing of the bundle
    assert out.startswith(f"Error: {b.root / 'manifest.yaml'}: "), out
    assert "kit sign" not in out and "Hint: pass --allow-unsigned again" in out, out


def test_resume_flags_are_the_command_lines_only(tmp_path: Path, kit_home: Path) -> None:
    b, runner = _trusted_bundle(tmp_path)
    set_run_flags(b, allow_unsigned=True, allow_unpinned=True)
    resign(b, runner)
    opts = RunOptions(resume=b.root, allow_unsigned=True)
    inputs = load_for_run(None, opts)
    assert opts.allow_unpinned is False and opts.allow_unsigned is True
    assert inputs.trust.allow_unsigned is True and inputs.trust.signed is False
    assert inputs.resume_note.startswith("verified; TRUSTED: signed by ")


def test_resume_rechecks_the_manifest_signature_under_the_current_policy(tmp_path: Path, kit_home: Path) -> None:
    """The manifest's signer was trusted where the bundle was made (an allowed_signers beside it); the current
    policy (the user's file) does not list it: the resume is refused."""
    project = tmp_path / "project"
    (project / "images").mkdir(parents=True)
    runner = key(tmp_path, "runner", "kit-runner@lab-host")
    trust_user(runner, NS_BUNDLE)
    b = bundle(project, runner)
    approver = key(tmp_path, "approver", "bob@elsewhere")
    b.path("manifest.yaml.sig").unlink()
    sign_manifest(b.path("manifest.yaml"), b.path("manifest.yaml").read_bytes(), approver)
    (project / "allowed_signers").write_text(f'bob namespaces="kit-manifest" {approver.public_line()}\n')
    resign(b, runner)
    code, out = _resume(b, tmp_path)
    assert code == 4, out
    assert "no signature by a trusted key" in out and approver.fingerprint in out
    # and given explicitly with --trust (for both roles), the same bundle resumes past the checks
    policy = tmp_path / "policy"
    policy.write_text(f'bob namespaces="kit-manifest" {approver.public_line()}\n'
                      f'r namespaces="kit-bundle" {runner.public_line()}\n')
    code, out = _resume(b, tmp_path, "--trust", str(policy))
    assert code == 2 and "no-such-key" in out, out  # stopped only at the (missing) runner key


def test_report_does_not_re_sign_a_bundle_from_an_untrusted_runner(tmp_path: Path, kit_home: Path) -> None:
    """`kit report` re-signs with this machine's runner key: a forged bundle must not come out trusted."""
    b, runner = _trusted_bundle(tmp_path)
    forge(b, key(tmp_path, "forger", runner.comment))
    r = CliRunner().invoke(main, ["report", str(b.root), "--key", str(runner.path)])
    assert r.exit_code == 9 and r.output.startswith(f"Error: UNTRUSTED: bundle {b.root} is signed by "), r.output
    assert CliRunner().invoke(main, ["verify", str(b.root)]).exit_code == 9
