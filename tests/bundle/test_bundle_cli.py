from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kit.bundle import Bundle, archive
from kit.cli import main


def test_kit_verify_bundle_exit_codes(bundle: Bundle, trust_file: Path, tmp_path: Path) -> None:
    cli = CliRunner()
    ok = cli.invoke(main, ["verify", str(bundle.root)])
    assert ok.exit_code == 0, ok.output
    assert f"ok: {bundle.root}:" in ok.output and "not in a trust file" in ok.output
    trusted = cli.invoke(main, ["verify", "--trust", str(trust_file), str(bundle.root)])
    assert trusted.exit_code == 0 and "signed by runner" in trusted.output
    out = tmp_path / "b.tar.gz"
    archive(bundle.root, out)
    assert cli.invoke(main, ["verify", "--trust", str(trust_file), str(out)]).exit_code == 0
    as_json = cli.invoke(main, ["verify", "--json", str(out)])
    assert as_json.exit_code == 0
    assert json.loads(as_json.output)[0]["archive"]["top"] == bundle.root.name

    rec = bundle.root / "cells" / "oea-r1" / "level-1" / "records.jsonl"
    rec.write_bytes(rec.read_bytes() + b"\n")
    bad = cli.invoke(main, ["verify", str(bundle.root)])
    assert bad.exit_code == 9
    assert "cells/oea-r1/level-1/records.jsonl: sha256 differs from the signed provenance" in bad.output


def test_kit_verify_untrusted_with_trust_exits_9(bundle: Bundle, tmp_path: Path) -> None:
    other = tmp_path / "other_signers"
    other.write_text("")
    res = CliRunner().invoke(main, ["verify", "--trust", str(other), str(bundle.root)])
    assert res.exit_code == 9 and "not in the trust file(s)" in res.output
