"""Issue 9: `kit verify BUNDLE` re-verifies manifest.yaml.sig under the current policy and shows every
recorded flag (a run made with --allow-unsigned says so); `kit compare` says its trust claims are unverified."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from trust_helpers import bundle, key, resign, set_run_flags, trust_user

from kit.cli import main
from kit.signing import NS_BUNDLE, NS_MANIFEST, sign_manifest


def _kit(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def test_verify_shows_allow_unsigned_and_rechecks_the_manifest(tmp_path: Path, kit_home: Path) -> None:
    runner = key(tmp_path, "runner", "kit-runner@lab-host")
    trust_user(runner, NS_BUNDLE)
    b = bundle(tmp_path, runner)
    b.path("manifest.yaml.sig").unlink()
    set_run_flags(b, allow_unsigned=True)
    resign(b, runner)
    code, out = _kit("verify", str(b.root))
    assert code == 0, out
    assert "manifest approval (kit-manifest): UNSIGNED" in out
    assert ("recorded flags: allow_unpinned=false, allow_unsigned=true; this run was made with --allow-unsigned: "
            "nobody had to approve the manifest it ran") in out
    doc = json.loads(_kit("verify", "--json", str(b.root))[1])[0]
    assert doc["flags"] == {"allow_unsigned": True, "allow_unpinned": False}
    assert doc["manifest_signature"]["trusted"] is False

    approver = key(tmp_path, "approver", "alice@lab")
    sign_manifest(b.path("manifest.yaml"), b.path("manifest.yaml").read_bytes(), approver)
    set_run_flags(b, allow_unsigned=False)
    resign(b, runner)
    code, out = _kit("verify", str(b.root))
    assert code == 0 and "manifest approval (kit-manifest): NOT trusted under your policy" in out, out
    trust_user(approver, NS_MANIFEST, "alice")
    code, out = _kit("verify", str(b.root))
    assert code == 0 and "manifest approval (kit-manifest): signed by alice (" in out, out
    assert "this run was made with --allow-unsigned" not in out


def test_compare_says_trust_is_not_verified(tmp_path: Path, kit_home: Path) -> None:
    runner = key(tmp_path, "runner", "kit-runner@lab-host")
    a, b = bundle(tmp_path / "a", runner), bundle(tmp_path / "b", runner)
    code, out = _kit("compare", str(a.root), str(b.root))
    assert code == 0, out
    assert "NOT VERIFIED: kit compare reads what each bundle's files claim" in out
    assert "trust unverified" in out
