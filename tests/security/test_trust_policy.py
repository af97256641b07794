"""Issue 9: trust comes only from the user's policy, per role, and `kit verify` says who signed.

Each test here failed on the old code: an untrusted bundle signer passed with a notice, and an
``allowed_signers`` found beside the content (the "project root") was trusted."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from trust_helpers import ROOT, bundle, forge, key, resign, trust_user

from kit.bundle import runner_key
from kit.cli import main
from kit.errors import UsageError
from kit.signing import NS_BUNDLE, NS_MANIFEST, load_signing_key, sign_manifest, user_trust_file


def _kit(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_forged_bundle_with_look_alike_comment_exits_9_without_trust(tmp_path: Path, kit_home: Path) -> None:
    """Records halved, summary recomputed, re-signed by a fresh key whose comment copies the runner's."""
    runner = key(tmp_path, "runner", "kit-runner@lab-host")
    trust_user(runner, NS_BUNDLE, "kit-runner@lab-host")  # the real runner IS trusted by the user
    b = bundle(tmp_path, runner)
    assert _kit("verify", str(b.root))[0] == 0
    forger = key(tmp_path, "forger", "kit-runner@lab-host")
    forge(b, forger)
    code, out = _kit("verify", str(b.root))
    assert code == 9, out
    first = out.splitlines()[0]
    assert first.startswith(f"Error: UNTRUSTED: bundle {b.root} is signed by {forger.fingerprint} (key comment "
                            "'kit-runner@lab-host': self-declared, not proof of identity), which your policy does "
                            f"not allow for kit-bundle (trust file(s) {user_trust_file()})"), first
    assert 'namespaces="kit-bundle"' in out and "confirm the fingerprint" in out
    # the same answer in --json
    code, out = _kit("verify", "--json", str(b.root))
    doc = json.loads(out)[0]
    assert code == 9 and doc["ok"] is False and doc["trust"] == "UNTRUSTED"
    assert doc["signers"] == [{"fingerprint": forger.fingerprint, "comment": "kit-runner@lab-host",
                               "trusted_by": None}]
    # --integrity-only: the forgery is internally consistent, and is called UNTRUSTED on the first line
    code, out = _kit("verify", "--integrity-only", str(b.root))
    assert code == 0 and out.startswith(f"ok: {b.root}: UNTRUSTED (--integrity-only: no trust decision made)")


def test_forged_bundle_exits_9_with_no_trust_file_at_all(tmp_path: Path, kit_home: Path) -> None:
    b = bundle(tmp_path, key(tmp_path, "runner", "kit-runner@lab-host"))
    code, out = _kit("verify", str(b.root))
    assert code == 9 and "UNTRUSTED" in out.splitlines()[0] and "no trust file" in out.splitlines()[0]


def test_trust_file_next_to_the_bundle_is_ignored(tmp_path: Path, kit_home: Path) -> None:
    """A "project" (images/ + allowed_signers) holding the bundle and a trust line for its signer."""
    project = tmp_path / "project"
    (project / "images").mkdir(parents=True)
    attacker = key(tmp_path, "attacker", "kit-runner@lab-host")
    b = bundle(project, attacker)
    line = f'kit-runner@lab-host namespaces="kit-bundle,kit-manifest" {attacker.public_line()}\n'
    for where in (project, project / "results", b.root.parent):
        (where / "allowed_signers").write_text(line)
    code, out = _kit("verify", str(b.root))
    assert code == 9 and "UNTRUSTED" in out.splitlines()[0] and "no trust file" in out, out


def test_trust_file_next_to_the_manifest_is_ignored(tmp_path: Path, kit_home: Path) -> None:
    """The issue's attack: a directory with a manifest, its .sig and its own allowed_signers."""
    project = tmp_path / "evil"
    (project / "images").mkdir(parents=True)
    m = project / "m.yaml"
    shutil.copy(ROOT / "experiments" / "demo.yaml", m)
    attacker = key(tmp_path, "attacker", "alice@trusted-lab")
    sign_manifest(m, m.read_bytes(), attacker)
    (project / "allowed_signers").write_text(f'alice@trusted-lab namespaces="kit-manifest" {attacker.public_line()}\n')
    code, out = _kit("verify", str(m))
    assert code == 4 and "no trust file to check the signature against" in out, out
    code, out = _kit("run", str(m), "--out", str(tmp_path / "r"), "--key", str(tmp_path / "no-such-key"))
    assert code == 4 and "no trust file" in out, out  # refused before anything runs
    assert not (tmp_path / "r").exists()
    # with a user policy that does not list the attacker: refused, naming who signed
    trust_user(key(tmp_path, "me", "me@lab"), NS_MANIFEST)
    code, out = _kit("verify", str(m))
    assert code == 4 and attacker.fingerprint in out and str(user_trust_file()) in out, out


def test_example_key_is_not_trusted_by_default(kit_home: Path, tmp_path: Path) -> None:
    demo = str(ROOT / "experiments" / "demo.yaml")
    code, out = _kit("verify", demo)
    assert code == 4 and "no trust file" in out, out
    trust_user(key(tmp_path, "me", "me@lab"), NS_MANIFEST)  # a real policy, without the example key
    code, out = _kit("verify", demo)
    assert code == 4 and "no signature by a trusted key" in out and "kit-example" in out, out
    code, out = _kit("run", demo, "--out", str(tmp_path / "r"), "--key", str(tmp_path / "no-such-key"))
    assert code == 4, out
    # passing the repo's file explicitly is what `make demo` does
    code, out = _kit("verify", "--trust", str(ROOT / "allowed_signers"), demo)
    assert code == 0 and "TRUSTED: signed by kit-example" in out, out


def test_repo_example_key_never_vouches_for_bundles(tmp_path: Path, kit_home: Path) -> None:
    """The repo's allowed_signers lists the published example key for kit-manifest only."""
    text = (ROOT / "allowed_signers").read_text()
    assert "kit-bundle" not in text.replace("kit-bundle,", "")  # no line grants kit-bundle


def test_runner_key_is_trusted_for_bundles_only_on_first_use(kit_home: Path) -> None:
    k, notice = runner_key(None)
    assert notice and "trusted it for kit-bundle only" in notice and str(user_trust_file()) in notice
    lines = [x for x in user_trust_file().read_text().splitlines() if x and not x.startswith("#")]
    assert lines == [f'{k.comment} namespaces="kit-bundle" {k.public_line()}']
    again, notice2 = runner_key(None)
    assert notice2 is None and again.fingerprint == k.fingerprint
    assert user_trust_file().read_text().count(k.public_line().split()[1]) == 1  # said and added once
    # it never approves manifests
    m = kit_home.parent / "m.yaml"
    shutil.copy(ROOT / "experiments" / "demo.yaml", m)
    sign_manifest(m, m.read_bytes(), k)
    code, out = _kit("verify", str(m))
    assert code == 4 and "namespace 'kit-manifest' not in" in out, out


def test_runner_key_passphrase(kit_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """KIT_KEY_PASSPHRASE at first use encrypts the runner key; without it (or wrong) the key does not load."""
    monkeypatch.setenv("KIT_KEY_PASSPHRASE", "s3cret")
    k, _ = runner_key(None)
    data = (user_trust_file().parent / "runner_ed25519").read_bytes()
    assert b"ENCRYPTED PRIVATE KEY" in data
    assert runner_key(None)[0].fingerprint == k.fingerprint
    monkeypatch.setenv("KIT_KEY_PASSPHRASE", "wrong")
    with pytest.raises(UsageError, match="wrong passphrase"):
        runner_key(None)
    monkeypatch.delenv("KIT_KEY_PASSPHRASE")
    with pytest.raises(UsageError, match="protected by a passphrase"):
        runner_key(None)


def test_a_wrong_passphrase_is_named_even_when_the_padding_happens_to_pass() -> None:
    """Was a flaky test_runner_key_passphrase (about 1 run in 256): an encrypted PEM key read with a wrong
    passphrase mostly fails cryptography's padding check ("bad decrypt"), but now and then the padding of the
    garbage passes and its parse fails instead ("Could not deserialize key data"), which kit called "not a
    readable private key". tests/data/keys/encrypted_ed25519.pem (passphrase "s3cret") with "wrong163", found
    by trying wrong passphrases against cryptography itself, is such a case, checked here first."""
    from cryptography.hazmat.primitives import serialization

    key = ROOT / "tests" / "data" / "keys" / "encrypted_ed25519.pem"
    with pytest.raises(ValueError, match="Could not deserialize key data"):  # the padding passed: not "decrypt"
        serialization.load_pem_private_key(key.read_bytes(), b"wrong163")
    with pytest.raises(UsageError, match="wrong passphrase"):
        load_signing_key(key, "wrong163")
    with pytest.raises(UsageError, match="wrong passphrase"):
        load_signing_key(key, "wrong")
    assert load_signing_key(key, "s3cret").fingerprint.startswith("SHA256:")


def test_a_passphrase_protected_openssh_key_gets_a_usage_error_not_a_traceback(tmp_path: Path) -> None:
    """`ssh-keygen -N` keys: cryptography reads them only with the bcrypt package, which kit does not require;
    without it the load was an uncaught UnsupportedAlgorithm (internal error, exit 1)."""
    import importlib.util

    key = tmp_path / "id_ed25519"
    made = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "pw", "-C", "me@lab", "-f", str(key)],
                          capture_output=True, text=True, check=False)
    assert made.returncode == 0, made.stderr
    if importlib.util.find_spec("bcrypt") is not None:
        assert load_signing_key(key, "pw").comment == "me@lab"
        return
    with pytest.raises(UsageError, match="cannot read this key here") as e:
        load_signing_key(key, "pw")
    assert "pip install bcrypt" in (e.value.hint or "")


def test_keygen_suggests_one_role(tmp_path: Path, kit_home: Path) -> None:
    code, out = _kit("keygen", "-o", str(tmp_path / "k1"), "-C", "me@lab")
    assert code == 0 and 'me@lab namespaces="kit-manifest" ssh-ed25519 ' in out and "kit-bundle" not in out
    code, out = _kit("keygen", "-o", str(tmp_path / "k2"), "-C", "me@lab", "--role", "bundle")
    assert code == 0 and 'me@lab namespaces="kit-bundle" ssh-ed25519 ' in out and "kit-manifest" not in out


def test_same_machine_verifies_and_a_resigned_bundle_does_not(tmp_path: Path, kit_home: Path) -> None:
    """The `make demo` flow without the engine: the runner key made on first use signs a bundle; `kit verify`
    exits 0 here (auto-trusted for kit-bundle), and 9 after the bundle is re-signed by another key."""
    k, _ = runner_key(None)
    b = bundle(tmp_path, k)
    code, out = _kit("verify", str(b.root))
    assert code == 0 and out.startswith(f"ok: {b.root}: TRUSTED: signed by {k.fingerprint}"), out
    resign(b, key(tmp_path, "other", k.comment))
    code, out = _kit("verify", str(b.root))
    assert code == 9 and "UNTRUSTED" in out.splitlines()[0], out


def test_own_runner_key_made_before_auto_trust_gets_a_precise_hint(tmp_path: Path, kit_home: Path) -> None:
    """A runner key made by an older kit is not in the policy: exit 9, and the hint says it is this machine's."""
    k, _ = runner_key(None)
    user_trust_file().write_text("")  # as an older kit left it: the key, no trust line
    b = bundle(tmp_path, k)
    code, out = _kit("verify", str(b.root))
    assert code == 9 and "that is this machine's own runner key" in out, out
    assert f'kit-runner namespaces="kit-bundle" {" ".join(k.public_line().split()[:2])}' in out
