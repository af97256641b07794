from __future__ import annotations

import base64
import json
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit import allowed_signers
from kit.cli import main
from kit.errors import ExitCode, SignatureError
from kit.signing import (
    fingerprint,
    generate_key,
    load_signing_key,
    load_trust,
    pae,
    sign_manifest,
    verify_manifest,
)

ROOT = Path(__file__).resolve().parent.parent


def test_pae_matches_the_dsse_spec_vector() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def _setup(tmp_path: Path, who: str = "alice") -> tuple[Path, Path, Path]:
    key = generate_key(tmp_path / f"{who}_key", f"{who}@lab")
    trust = tmp_path / "allowed_signers"
    with trust.open("a") as f:
        f.write(f'{who}@lab namespaces="kit-manifest" {key.public_line()}\n')
    m = tmp_path / "m.yaml"
    shutil.copy(ROOT / "experiments/demo.yaml", m)
    return key.path, trust, m


def test_sign_then_verify_and_every_single_byte_change_fails(tmp_path: Path, kit_home: Path) -> None:
    key, trust, m = _setup(tmp_path)
    r = CliRunner().invoke(main, ["sign", str(m), "--key", str(key)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)])
    assert r.exit_code == 0, r.output
    assert "alice@lab" in r.output
    raw = m.read_bytes()
    rng = random.Random(1)
    positions = sorted({0, len(raw) - 1, *rng.sample(range(len(raw)), 40)})
    for pos in positions:
        changed = bytearray(raw)
        changed[pos] ^= 0x01
        m.write_bytes(bytes(changed))
        r = CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)])
        assert r.exit_code == 4, (pos, r.output)
        assert "changed after it was signed" in r.output
    m.write_bytes(raw + b"\n")
    assert CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)]).exit_code == 4
    m.write_bytes(raw)
    assert CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)]).exit_code == 0


def test_untrusted_signer_is_named(tmp_path: Path, kit_home: Path) -> None:
    _, trust, m = _setup(tmp_path)
    mallory = generate_key(tmp_path / "mallory", "mallory@evil")
    CliRunner().invoke(main, ["sign", str(m), "--key", str(mallory.path)])
    r = CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)])
    assert r.exit_code == 4
    assert mallory.fingerprint in r.output and "mallory@evil" in r.output and "not" in r.output


def test_several_signatures_and_any_trusted_one_counts(tmp_path: Path, kit_home: Path) -> None:
    key, trust, m = _setup(tmp_path)
    bob = generate_key(tmp_path / "bob", "bob@lab")
    sign_manifest(m, m.read_bytes(), bob_key := load_signing_key(bob.path))
    _, n = sign_manifest(m, m.read_bytes(), load_signing_key(key))
    assert n == 2
    envelope = json.loads((tmp_path / "m.yaml.sig").read_text())
    assert {s["keyid"] for s in envelope["signatures"]} == {bob_key.fingerprint, load_signing_key(key).fingerprint}
    mt = verify_manifest(m, m.read_bytes(), [trust])
    assert [p for p, _, _ in mt.signers] == ["alice@lab"]


def test_wrong_namespace_and_expired_keys_are_not_trusted(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "k", "k@lab")
    m = tmp_path / "m.yaml"
    shutil.copy(ROOT / "experiments/demo.yaml", m)
    sign_manifest(m, m.read_bytes(), key)
    for opts in ('namespaces="kit-bundle"', 'valid-before="20200101"', 'valid-after="29990101"'):
        trust = tmp_path / "t"
        trust.write_text(f"k@lab {opts} {key.public_line()}\n")
        with pytest.raises(SignatureError, match="no signature by a trusted key"):
            verify_manifest(m, m.read_bytes(), [trust])


def test_tampered_signature_and_garbage_envelopes(tmp_path: Path) -> None:
    key, trust, m = _setup(tmp_path)
    sign_manifest(m, m.read_bytes(), load_signing_key(key))
    sig = tmp_path / "m.yaml.sig"
    env = json.loads(sig.read_text())
    raw_sig = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    raw_sig[0] ^= 1
    env["signatures"][0]["sig"] = base64.b64encode(bytes(raw_sig)).decode()
    sig.write_text(json.dumps(env))
    with pytest.raises(SignatureError, match="did not verify"):
        verify_manifest(m, m.read_bytes(), [trust])
    for garbage in (b"", b"not json", b"[]", b'{"payload": 1, "signatures": []}',
                    b'{"payloadType": "x", "payload": "", "signatures": []}'):
        sig.write_bytes(garbage)
        with pytest.raises(SignatureError):
            verify_manifest(m, m.read_bytes(), [trust])


def test_unsigned_manifest_gives_exit_4_with_hint(tmp_path: Path, kit_home: Path) -> None:
    m = tmp_path / "m.yaml"
    shutil.copy(ROOT / "experiments/demo.yaml", m)
    r = CliRunner().invoke(main, ["verify", str(m)])
    assert r.exit_code == 4
    assert "not signed" in r.output and "kit sign" in r.output


def test_shipped_manifests_verify_with_the_repo_trust_file(kit_home: Path) -> None:
    files = sorted(str(p) for p in (ROOT / "experiments").glob("*.yaml"))
    r = CliRunner().invoke(main, ["verify", *files, "--trust", str(ROOT / "allowed_signers")])
    assert r.exit_code == 0, r.output
    assert r.output.count("kit-example") == len(files)


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen not installed")
def test_keys_interoperate_with_openssh(tmp_path: Path) -> None:
    """A key from ssh-keygen signs for kit, and kit's fingerprint equals ssh-keygen -lf."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "o@lab", "-f", str(tmp_path / "o")],
                   check=True)
    key = load_signing_key(tmp_path / "o")
    out = subprocess.run(["ssh-keygen", "-lf", str(tmp_path / "o.pub")], capture_output=True, text=True, check=True)
    assert out.stdout.split()[1] == key.fingerprint == fingerprint(key.public)
    ours = generate_key(tmp_path / "ours", "ours@lab")
    out = subprocess.run(["ssh-keygen", "-lf", str(ours.path)], capture_output=True, text=True, check=True)
    assert out.stdout.split()[1] == ours.fingerprint


def test_allowed_signers_parsing(tmp_path: Path) -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3lKu2Eaqir5Wi+R44pDwEuDfFJHlGGFKEXqIYwyP52"
    text = f"""# comment
a@x,b@x namespaces="kit-manifest,git",valid-after="20200101" {key} c
* {key}
rsa@x ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ
ca@x cert-authority {key}
"""
    (tmp_path / "f").write_text(text)
    entries = load_trust([tmp_path / "f"])
    assert [e.source for e in entries] == [f"{tmp_path / 'f'}:{n}" for n in (2, 3, 4, 5)]
    assert not allowed_signers.problems(entries)  # other key types and cert-authority lines are not errors
    usable = [e for e in entries if e.key is not None]  # ...but they can never allow a kit (plain ed25519) key
    assert [e.principals for e in usable] == [b"a@x,b@x", b"*"]
    assert usable[0].namespaces == b"kit-manifest,git" and usable[1].namespaces is None


def test_keygen_cli_refuses_to_overwrite(tmp_path: Path) -> None:
    p = tmp_path / "k"
    assert CliRunner().invoke(main, ["keygen", "-o", str(p), "-C", "x@y"]).exit_code == 0
    assert oct(p.stat().st_mode & 0o777) == "0o600"
    r = CliRunner().invoke(main, ["keygen", "-o", str(p)])
    assert r.exit_code == 2 and "already exists" in r.output


def test_unknown_allowed_signers_option_skips_the_line_and_is_named_not_wider_trust(tmp_path: Path) -> None:
    """Issue 9: as in ssh-keygen, a line with an unknown option is skipped (it trusts nothing); kit names it."""
    key = generate_key(tmp_path / "k", "k@lab")
    m = tmp_path / "m.yaml"
    shutil.copy(ROOT / "experiments/demo.yaml", m)
    sign_manifest(m, m.read_bytes(), key)
    trust = tmp_path / "t"
    trust.write_text(f'k@lab namespace="kit-manifest" {key.public_line()}\n')
    assert [e.key for e in load_trust([trust])] == [None]  # reading the file does not raise
    with pytest.raises(SignatureError, match="no signature by a trusted key") as e:
        verify_manifest(m, m.read_bytes(), [trust])
    assert f"{trust}:1: " in e.value.message and "unknown key option" in e.value.message


def test_a_malformed_line_beside_a_trusting_one_passes_with_a_note(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "k", "k@lab")
    m = tmp_path / "m.yaml"
    shutil.copy(ROOT / "experiments/demo.yaml", m)
    sign_manifest(m, m.read_bytes(), key)
    trust = tmp_path / "t"
    trust.write_text(f'k@lab nope {key.public_line()}\nk@lab namespaces="kit-manifest" {key.public_line()}\n')
    mt = verify_manifest(m, m.read_bytes(), [trust])
    assert mt.signers == (("k@lab", key.fingerprint, f"{trust}:2"),)
    assert f"{trust}:1: " in mt.note and "unknown key option" in mt.note


@pytest.mark.parametrize("kind", ["not-utf8", "directory", "too-large", "device"])
def test_unreadable_trust_files_are_signature_errors_naming_the_file(tmp_path: Path, kit_home: Path,
                                                                     kind: str) -> None:
    key, _, m = _setup(tmp_path)
    sign_manifest(m, m.read_bytes(), load_signing_key(key))
    trust = tmp_path / "bad"
    if kind == "not-utf8":
        trust.write_bytes(b"k@lab \xff\xfe ssh-ed25519 AAAA\n")
    elif kind == "directory":
        trust.mkdir()
    elif kind == "too-large":
        trust.write_bytes(b"#" * (1 << 20) + b"\n")
    else:
        trust = Path("/dev/zero")
    with pytest.raises(SignatureError) as e:
        verify_manifest(m, m.read_bytes(), [trust])
    assert str(trust) in e.value.message and e.value.exit_code == ExitCode.SIGNATURE
    r = CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)])
    expected = 2 if kind == "directory" else 4  # click's --trust option refuses a directory itself (usage)
    assert r.exit_code == expected and str(trust) in r.output and "Traceback" not in r.output, r.output


def test_a_passphrase_meant_for_another_key_does_not_break_an_unencrypted_one(tmp_path: Path) -> None:
    key = generate_key(tmp_path / "k", "k@lab")
    assert load_signing_key(key.path, "some-passphrase").fingerprint == key.fingerprint


def test_signature_statement_lists_each_context_and_cosigning_keeps_only_the_same_statement(tmp_path: Path) -> None:
    """Context subjects (issue 9): a second signer over the same manifest and contexts adds a signature; a
    signature over other context digests is replaced, not kept beside a statement it did not sign."""
    alice = generate_key(tmp_path / "alice", "alice@lab")
    bob = generate_key(tmp_path / "bob", "bob@lab")
    m = tmp_path / "m.yaml"
    shutil.copy(ROOT / "experiments/demo.yaml", m)
    ctx = {"context:a:images/app": ("1" * 64, {"Dockerfile": "644 " + "2" * 64})}
    assert sign_manifest(m, m.read_bytes(), alice, ctx)[1] == 1
    assert sign_manifest(m, m.read_bytes(), bob, ctx)[1] == 2
    stmt = json.loads(base64.b64decode(json.loads((tmp_path / "m.yaml.sig").read_text())["payload"]))
    subject = next(s for s in stmt["subject"] if s["name"] == "context:a:images/app")
    assert subject["digest"] == {"sha256": "1" * 64}
    assert subject["annotations"] == {"files": {"Dockerfile": "644 " + "2" * 64}}
    changed = {"context:a:images/app": ("3" * 64, {"Dockerfile": "644 " + "4" * 64})}
    assert sign_manifest(m, m.read_bytes(), bob, changed)[1] == 1
