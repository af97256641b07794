"""A received bundle shaped to crash kit: deep directories (the walk is iterative, so depth alone cannot exhaust
the stack; the test stays shallow enough that pytest's recursive clean-up of old temp dirs never trips on it), a deeply nested summary.json, odd files under
kit compare. Each is a user error (exit 9) naming the file, never an internal error (exit 1)."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.bundles import ROOT, build_bundle

from kit.bundle import safe_extract
from kit.bundle.names import MAX_WALK_DEPTH
from kit.cli import main
from kit.errors import BundleError, ExitCode
from kit.signing import SigningKey, generate_key
from kit.stats import power


@pytest.fixture
def signed(tmp_path: Path, kit_home: Path) -> tuple[Path, Path, SigningKey]:
    key = generate_key(tmp_path / "keys" / "runner", "kit-runner@test")
    trust = tmp_path / "trust"
    trust.write_text(f'runner namespaces="kit-bundle" {key.public_line()}\n')
    return build_bundle(tmp_path / "results", key).root, trust, key


def _kit(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    assert "Traceback" not in r.output and "internal error" not in r.output, r.output
    return r.exit_code, r.output


def test_deep_directories_in_a_bundle_are_exit_9(signed: tuple[Path, Path, SigningKey]) -> None:
    root, trust, _ = signed
    deep = root / "notes"  # exists: the factory writes notes/ünïcode name.txt
    for _ in range(MAX_WALK_DEPTH + 8):  # deeper than kit allows; shallow enough for pytest's own rmtree later
        deep = deep / "d"
        deep.mkdir()
    for args in (["verify", "--trust", str(trust), str(root)], ["verify", "--integrity-only", str(root)]):
        code, out = _kit(*args)
        assert code == ExitCode.BUNDLE_INVALID and "nested deeper than" in out, out


def test_deeply_nested_summary_is_exit_9_with_integrity_only(signed: tuple[Path, Path, SigningKey]) -> None:
    root, _, _ = signed
    (root / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    code, out = _kit("verify", "--integrity-only", str(root))
    assert code == ExitCode.BUNDLE_INVALID, out


@pytest.mark.parametrize("name,make", [
    ("run.json", lambda p: p.write_bytes(b'{"a":"\xff"}')),
    ("environment.json", lambda p: (p.unlink(), p.mkdir())),
    ("images.json", lambda p: (p.unlink(missing_ok=True), p.symlink_to("/dev/zero"))),
    ("run.json", lambda p: p.write_text("[" * 100_000)),
])
def test_compare_refuses_odd_files_with_exit_9(signed: tuple[Path, Path, SigningKey], tmp_path: Path,
                                               name: str, make: object) -> None:
    root, _, _ = signed
    other = tmp_path / "other"
    shutil.copytree(root, other)
    make(other / name)  # type: ignore[operator]
    code, out = _kit("compare", str(root), str(other))
    assert code == ExitCode.BUNDLE_INVALID and name in out, out


# ---- a third review's attacks (2026-12-06): each was an internal error (exit 1), a hang, a read through a link
# out of the bundle, or a change to a bundle before it was checked

DEEP = "[" * 100_000 + "]" * 100_000


def test_deep_json_in_any_signature_envelope_is_a_clear_error(signed: tuple[Path, Path, SigningKey],
                                                              tmp_path: Path) -> None:
    root, trust, _ = signed
    manifest = tmp_path / "m.yaml"
    shutil.copy(ROOT / "experiments" / "demo.yaml", manifest)
    Path(f"{manifest}.sig").write_text(DEEP)
    code, out = _kit("verify", "--trust", str(trust), str(manifest))
    assert code == ExitCode.SIGNATURE and "nested too deeply" in out, out
    other = tmp_path / "other"
    shutil.copytree(root, other)
    (other / "provenance.dsse.json").write_text(DEEP)
    for args in (["verify", "--trust", str(trust), str(other)], ["verify", "--integrity-only", str(other)]):
        code, out = _kit(*args)
        assert code == ExitCode.BUNDLE_INVALID and "nested too deeply" in out, (args, out)
    # kit compare verifies neither bundle; it reads the provenance only for the model's digest, absent here
    code, out = _kit("compare", str(other), str(root))
    assert code == 0, out


def test_a_link_in_a_shared_bundle_is_never_read_through(signed: tuple[Path, Path, SigningKey], tmp_path: Path) -> None:
    """A bundle's manifest.yaml linked to a file of the reader's: `kit compare` and `kit report` (which read a bundle
    before or without verifying it) refuse it by name and quote none of it; so for a linked summary or cell folder."""
    root, _, _ = signed
    secret = tmp_path / "shadow"
    secret.write_text("root:SECRET-HASH:19000:0:99999:7:::\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    for rel in ("manifest.yaml", "summary.json", "cells"):
        other = tmp_path / f"linked-{rel}"
        shutil.copytree(root, other)
        target = other / rel
        if rel == "manifest.yaml":
            target.unlink()
            target.symlink_to(secret)
        else:
            moved = outside / f"{rel}-{other.name}"
            shutil.move(target, moved)
            target.symlink_to(moved)
        for args in (["compare", str(other), str(root)], ["compare", str(root), str(other)], ["report", str(other)]):
            code, out = _kit(*args)
            assert code == ExitCode.BUNDLE_INVALID and "SECRET" not in out, (rel, args, out)
            assert "symbolic link" in out, (rel, args, out)


def test_reproduce_refuses_a_fifo_named_like_an_archive_at_once(tmp_path: Path, kit_home: Path) -> None:
    fifo = tmp_path / "x.tar.gz"
    os.mkfifo(fifo)
    # in its own process, with a bound: the open of a FIFO blocks until a writer comes, which none does here
    r = subprocess.run([sys.executable, "-m", "kit", "reproduce", str(fifo)], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "XDG_CONFIG_HOME": str(kit_home)}, check=False)
    assert r.returncode == ExitCode.BUNDLE_INVALID and "not a regular file" in r.stderr, r.stdout + r.stderr
    with pytest.raises(BundleError, match="not a regular file"):  # the extraction itself refuses one too
        (tmp_path / "dest").mkdir()
        safe_extract(fifo, tmp_path / "dest")


def test_sign_drops_a_malformed_entry_of_the_old_signature_file(tmp_path: Path, kit_home: Path) -> None:
    """Entries no verifier can check (not an object, no string sig) go; another signer's entry without a keyid
    (optional in DSSE: kit's verifier tries it against every trusted key) stays, and still verifies."""
    manifest = tmp_path / "demo.yaml"
    shutil.copy(ROOT / "experiments" / "demo.yaml", manifest)
    sig = Path(f"{manifest}.sig")
    env = json.loads((ROOT / "experiments" / "demo.yaml.sig").read_text())
    example = [{k: v for k, v in s.items() if k != "keyid"} for s in env["signatures"]]
    sig.write_text(json.dumps({**env, "signatures": [*example, 1, {"keyid": 2}]}))
    code, out = _kit("verify", "--trust", str(ROOT / "allowed_signers"), str(manifest))
    assert code == ExitCode.SIGNATURE and "malformed signature entry" in out, out
    key = generate_key(tmp_path / "k", "me@test")
    code, out = _kit("sign", str(manifest), "--key", str(key.path))
    assert code == 0 and "(2 signature(s))" in out, out  # the example key's, kept, and this one
    code, out = _kit("verify", "--trust", str(ROOT / "allowed_signers"), str(manifest))
    assert code == 0 and "TRUSTED" in out, out


def test_absurd_spread_is_an_infinite_figure_not_an_error() -> None:
    assert power.cv_from_sd(40.0) == math.inf and power.cv_from_sd(1e200) == math.inf
    assert power.percent_up(1e4) == math.inf and power.percent_down(-1e4) == -math.inf
    assert power.percent_down(1e4) == 100.0 and power.cv_from_sd(0.1) == pytest.approx(0.10025, rel=1e-4)


def test_compare_looks_through_a_bundle_without_recursion_or_skipping(
        signed: tuple[Path, Path, SigningKey], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The look for links is iterative and depth-capped (a 1,100-deep tree was a RecursionError), a folder it cannot
    list is an error rather than skipped (a link inside would go unseen), and it comes after the check that the
    folder is a bundle at all."""
    root, _, _ = signed
    deep = tmp_path / "deep"
    shutil.copytree(root, deep)
    d = deep / "notes"
    for _ in range(MAX_WALK_DEPTH + 8):
        d = d / "d"
        d.mkdir(parents=True)
    code, out = _kit("compare", str(deep), str(root))
    assert code == ExitCode.BUNDLE_INVALID and "nested deeper than" in out, out
    other = tmp_path / "other"
    shutil.copytree(root, other)
    real = os.scandir

    def refused(path: object) -> object:  # what a folder of mode 0311 does to a reader without root's rights
        if str(path).endswith("/cells"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr("kit.plumbing.files.os.scandir", refused)
    code, out = _kit("compare", str(other), str(root))
    assert code == ExitCode.BUNDLE_INVALID and "cannot look through it" in out and "Permission denied" in out, out
    monkeypatch.undo()
    stranger = tmp_path / "not-a-bundle"
    (stranger / "sub").mkdir(parents=True)
    (stranger / "sub" / "link").symlink_to("/etc")
    code, out = _kit("compare", str(stranger), str(root))
    assert code == ExitCode.BUNDLE_INVALID and "not a kit bundle (no run.json)" in out, out
