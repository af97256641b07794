"""`kit report` re-signs only what it changed, only with a key the reader's policy trusts (an outside review,
2026-12-07): it re-signed a bundle whose report, summary and plots came out byte-identical, replacing the original
runner's signature with the local key (the original runner's machine then said exit 9), also with a --key that
the policy did not trust; and its own hint named `--trust`, an option it did not have."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.bundles import build_bundle

from kit.bundle import verify_bundle
from kit.cli import main
from kit.errors import BundleError
from kit.report import rebuild as rebuild_module
from kit.signing import SigningKey, generate_key, user_trust_file


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _trust(path: Path, *keys: SigningKey) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f'k{i} namespaces="kit-bundle" {k.public_line()}\n' for i, k in enumerate(keys)))
    return path


def _changing(monkeypatch: pytest.MonkeyPatch) -> None:
    """A report that comes out different (as a newer kit's rendering would)."""
    real = rebuild_module.render_report

    def render(root: Path, summary: object) -> list[Path]:
        out = real(root, summary)  # type: ignore[arg-type]
        with open(root / "report.md", "a") as f:
            f.write("\nrendered again\n")
        return out

    monkeypatch.setattr(rebuild_module, "render_report", render)


def test_nothing_changed_nothing_re_signed(tmp_path: Path, runner: SigningKey, kit_home: Path) -> None:
    b = build_bundle(tmp_path / "results", runner)
    _trust(user_trust_file(), runner)
    rebuild_module.rebuild(b.root, runner.path)  # the test bundle's own report may differ from kit's rendering
    before = _hashes(b.root)
    other = generate_key(tmp_path / "keys" / "other", "other@lab")
    _trust(user_trust_file(), runner, other)
    lines = rebuild_module.rebuild(b.root, other.path)
    assert "byte for byte as signed: nothing rewritten" in lines[-1] and runner.fingerprint in lines[-1]
    assert _hashes(b.root) == before  # the provenance too: still the runner's signature
    verify_bundle(b.root, [_trust(tmp_path / "only-runner", runner)])


def test_a_changed_report_is_re_signed_only_with_a_trusted_key(tmp_path: Path, runner: SigningKey, kit_home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    b = build_bundle(tmp_path / "results", runner)
    _trust(user_trust_file(), runner)
    stranger = generate_key(tmp_path / "keys" / "stranger", "stranger@elsewhere")
    before = _hashes(b.root)
    _changing(monkeypatch)
    with pytest.raises(BundleError, match="which your policy does not allow for kit-bundle") as err:
        rebuild_module.rebuild(b.root, stranger.path)
    assert 'namespaces="kit-bundle"' in str(err.value.hint)
    assert _hashes(b.root) == before  # put back as it was, sealed by the runner
    other = generate_key(tmp_path / "keys" / "other", "other@lab")
    _trust(user_trust_file(), runner, other)
    lines = rebuild_module.rebuild(b.root, other.path)
    assert f"re-signed provenance with {other.fingerprint}" in lines
    assert any(line.startswith(f"note: it was signed by {runner.fingerprint}") for line in lines)
    verify_bundle(b.root, [])


def test_report_takes_trust_files_as_verify_does(tmp_path: Path, runner: SigningKey, kit_home: Path) -> None:
    b = build_bundle(tmp_path / "results", runner)
    r = CliRunner().invoke(main, ["report", "--key", str(runner.path), str(b.root)])
    assert r.exit_code == 9 and "--trust" in r.output, r.output  # the hint names --trust ...
    trust = _trust(tmp_path / "team" / "allowed_signers", runner)
    r = CliRunner().invoke(main, ["report", "--key", str(runner.path), "--trust", str(trust), str(b.root)])
    assert r.exit_code == 0, r.output  # ... and report takes it


def test_an_unchanged_bundle_needs_no_runner_key(tmp_path: Path, runner: SigningKey, kit_home: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing to sign, no key read: an encrypted runner key with no passphrase given, or none at all, is no error
    where the report comes out as signed (a fresh-eyes review: it loaded, or made, one all the same)."""
    b = build_bundle(tmp_path / "results", runner)
    _trust(user_trust_file(), runner)
    rebuild_module.rebuild(b.root, runner.path)
    before = _hashes(b.root)
    lines = rebuild_module.rebuild(b.root, tmp_path / "no-such-key")
    assert "nothing rewritten" in lines[-1] and _hashes(b.root) == before
    _changing(monkeypatch)
    with pytest.raises(Exception, match="no-such-key"):
        rebuild_module.rebuild(b.root, tmp_path / "no-such-key")
    assert _hashes(b.root) == before  # a key that cannot be read: put back as it was
