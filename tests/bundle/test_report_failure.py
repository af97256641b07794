"""`kit report` that fails part-way (a figure, a full disk) leaves the bundle exactly as it was, sealed by its old
provenance; a review's server sent metrics of ±1.7e308 (finite, so kept), the latency axis overflowed, and `kit
report`, the command the run's own hint names, ended with an internal error leaving the bundle unsealed (kit verify
exit 9, half-written plots). And a figure matplotlib cannot draw is replaced by one that says so."""

from __future__ import annotations

import errno
import hashlib
from pathlib import Path

import pytest

from kit.bundle import Bundle, verify_bundle
from kit.errors import BundleError
from kit.report import plots
from kit.report import rebuild as rebuild_module
from kit.signing import SigningKey, user_trust_file


def _hashes(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_report_that_fails_half_way_leaves_the_bundle_sealed_as_it_was(
        bundle: Bundle, runner: SigningKey, monkeypatch: pytest.MonkeyPatch) -> None:
    trust = user_trust_file()
    trust.parent.mkdir(parents=True, exist_ok=True)
    trust.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    verify_bundle(bundle.root, [])
    before = _hashes(bundle.root)
    real = rebuild_module.render_report

    def fails_after_writing(root: Path, summary: object) -> list[Path]:
        real(root, summary)  # type: ignore[arg-type]  # every plot and report.md rewritten, then the disk is full
        (root / "plots" / "extra.png").write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(rebuild_module, "render_report", fails_after_writing)
    with pytest.raises(OSError):
        rebuild_module.rebuild(bundle.root, runner.path)
    assert _hashes(bundle.root) == before
    verify_bundle(bundle.root, [])


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_a_figure_whose_axis_overflows_is_drawn_as_a_note(tmp_path: Path) -> None:
    fig = plots._figure(plots.PLOT_SIZE)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([0, 1, 2], [1.7e308, -1.7e308, 1.7e308])  # finite values whose range is not
    out = plots._save(fig, tmp_path / "p.png")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_a_report_of_a_changed_bundle_touches_nothing_and_a_stray_temp_file_goes_by_name(
        bundle: Bundle, runner: SigningKey) -> None:
    """`kit report` verifies before it changes anything: a temp-named file it would drop stays when the bundle
    fails verification (a changed record); on a bundle that verifies, it is the only change, and it is named."""
    trust = user_trust_file()
    trust.parent.mkdir(parents=True, exist_ok=True)
    trust.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    stray = bundle.root / "cells" / ".notes.txt.tmp-1-deadbeef"
    stray.write_text("not a result\n")
    records = next(bundle.root.glob("cells/*/level-*/records.jsonl"))
    original = records.read_bytes()
    records.write_bytes(original + b"\n")
    before = _hashes(bundle.root)
    with pytest.raises(BundleError, match=r"records\.jsonl"):
        rebuild_module.rebuild(bundle.root, runner.path)
    assert _hashes(bundle.root) == before  # the stray file too
    records.write_bytes(original)
    lines = rebuild_module.rebuild(bundle.root, runner.path)
    assert not stray.exists() and f"removed {stray.relative_to(bundle.root).as_posix()}: the temp file" in lines[0]
    verify_bundle(bundle.root, [])
