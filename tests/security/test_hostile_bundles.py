"""A received bundle shaped to crash kit: deep directories (the walk is iterative, so depth alone cannot exhaust
the stack; the test stays shallow enough that pytest's recursive clean-up of old temp dirs never trips on it), a deeply nested summary.json, odd files under
kit compare. Each is a user error (exit 9) naming the file, never an internal error (exit 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.bundles import build_bundle

from kit.bundle.names import MAX_WALK_DEPTH
from kit.cli import main
from kit.errors import ExitCode
from kit.signing import SigningKey, generate_key


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
