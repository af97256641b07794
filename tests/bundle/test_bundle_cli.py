from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kit.bundle import Bundle, archive
from kit.cli import main


def test_kit_verify_bundle_exit_codes(bundle: Bundle, trust_file: Path, tmp_path: Path) -> None:
    """Was: without --trust an untrusted signer passed (exit 0) with a notice; now exit 9 (issue 9)."""
    cli = CliRunner()
    untrusted = cli.invoke(main, ["verify", str(bundle.root)])
    assert untrusted.exit_code == 9, untrusted.output
    assert untrusted.output.startswith(f"Error: UNTRUSTED: bundle {bundle.root} is signed by ")
    integrity = cli.invoke(main, ["verify", "--integrity-only", str(bundle.root)])
    assert integrity.exit_code == 0 and integrity.output.startswith(f"ok: {bundle.root}: UNTRUSTED (--integrity-only")
    trusted = cli.invoke(main, ["verify", "--trust", str(trust_file), str(bundle.root)])
    assert trusted.exit_code == 0 and trusted.output.startswith(f"ok: {bundle.root}: TRUSTED: signed by ")
    assert "as 'runner' by" in trusted.output.splitlines()[0]
    out = tmp_path / "b.tar.gz"
    archive(bundle.root, out)
    assert cli.invoke(main, ["verify", "--trust", str(trust_file), str(out)]).exit_code == 0
    as_json = cli.invoke(main, ["verify", "--json", "--trust", str(trust_file), str(out)])
    assert as_json.exit_code == 0
    assert json.loads(as_json.output)[0]["archive"]["top"] == bundle.root.name
    assert json.loads(as_json.output)[0]["trust"] == "TRUSTED"
    as_json = cli.invoke(main, ["verify", "--json", str(out)])
    assert as_json.exit_code == 9
    doc = json.loads(as_json.output)[0]
    assert doc["ok"] is False and doc["trust"] == "UNTRUSTED" and doc["signers"][0]["trusted_by"] is None

    rec = bundle.root / "cells" / "oea-r1" / "level-1" / "records.jsonl"
    rec.write_bytes(rec.read_bytes() + b"\n")
    bad = cli.invoke(main, ["verify", "--trust", str(trust_file), str(bundle.root)])
    assert bad.exit_code == 9
    assert "cells/oea-r1/level-1/records.jsonl: sha256 differs from the signed provenance" in bad.output


def test_kit_verify_untrusted_with_trust_exits_9(bundle: Bundle, tmp_path: Path) -> None:
    other = tmp_path / "other_signers"
    other.write_text("")
    res = CliRunner().invoke(main, ["verify", "--trust", str(other), str(bundle.root)])
    assert res.exit_code == 9 and "which your policy does not allow for kit-bundle" in res.output
