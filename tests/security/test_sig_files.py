"""Signature files as an attacker leaves them: a garbage co-signature, a symlinked .sig, a .sig that is a
directory. Each fails closed with exit 4 and a message naming the file; signing never writes through a link."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from kit.cli import main
from kit.errors import ExitCode
from kit.signing import generate_key

ROOT = Path(__file__).resolve().parents[2]


def _signed_demo(tmp_path: Path) -> tuple[Path, Path]:
    m = tmp_path / "demo.yaml"
    shutil.copyfile(ROOT / "experiments" / "demo.yaml", m)
    key = generate_key(tmp_path / "k", "alice@lab")
    trust = tmp_path / "trust"
    trust.write_text(f'alice@lab namespaces="kit-manifest" {key.public_line()}\n')
    r = CliRunner().invoke(main, ["sign", str(m), "--key", str(key.path)])
    assert r.exit_code == 0, r.output
    return m, trust


def test_one_good_and_one_garbage_signature_fails_closed(tmp_path: Path) -> None:
    m, trust = _signed_demo(tmp_path)
    assert CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)]).exit_code == 0
    sig = m.with_name("demo.yaml.sig")
    env = json.loads(sig.read_text())
    env["signatures"].append({"keyid": "SHA256:garbage", "sig": "AAAA" * 22})
    sig.write_text(json.dumps(env))
    r = CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)])
    assert r.exit_code == ExitCode.SIGNATURE, r.output
    assert "1 signature(s) did not verify (keyid SHA256:garbage)" in r.output and "Traceback" not in r.output


def test_signing_refuses_a_symlinked_sig_and_never_writes_through_it(tmp_path: Path) -> None:
    m = tmp_path / "demo.yaml"
    shutil.copyfile(ROOT / "experiments" / "demo.yaml", m)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    m.with_name("demo.yaml.sig").symlink_to(victim)
    key = generate_key(tmp_path / "k", "alice@lab")
    r = CliRunner().invoke(main, ["sign", str(m), "--key", str(key.path)])
    assert r.exit_code == ExitCode.SIGNATURE, r.output
    assert "is a symbolic link" in r.output
    assert victim.read_text() == "precious\n"


def test_a_symlinked_or_directory_sig_is_refused_on_verify(tmp_path: Path) -> None:
    m, trust = _signed_demo(tmp_path)
    sig = m.with_name("demo.yaml.sig")
    real = tmp_path / "real.sig"
    sig.rename(real)
    sig.symlink_to(real)
    r = CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)])
    assert r.exit_code == ExitCode.SIGNATURE and "is a symbolic link" in r.output, r.output
    sig.unlink()
    sig.mkdir()
    for args in (["verify", str(m), "--trust", str(trust)], ["run", str(m), "--trust", str(trust)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == ExitCode.SIGNATURE, (args, r.output)
        assert "cannot be read as a signature file (is a directory)" in r.output, r.output  # was "...: 3)"
        assert "Traceback" not in r.output and "sign the manifest again" in r.output
    sig.rmdir()
    sig.write_text("junk\n")
    r = CliRunner().invoke(main, ["verify", str(m), "--trust", str(trust)])
    assert r.exit_code == ExitCode.SIGNATURE and "not a JSON signature envelope" in r.output
    assert "Hint: it must be the JSON envelope kit wrote" in r.output
