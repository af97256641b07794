"""``load.request.ca_bundle`` and ``verify_tls`` apply to ``server.scheme: https`` only: with http they are refused by
the manifest (exit 3), since signed they would do nothing (review 2 found them accepted, doing nothing, before kit
run spoke https); with https they load. The shipped demo manifest, loaded for real, is the starting point."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.manifest.loading import load_manifest

ROOT = Path(__file__).resolve().parents[2]


def test_tls_settings_need_an_https_server(tmp_path: Path) -> None:
    text = (ROOT / "experiments" / "demo.yaml").read_text()
    assert "  seed: 7\n" in text and "\nserver:\n" in text
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    pin = f"{{path: {ca}, sha256: {hashlib.sha256(ca.read_bytes()).hexdigest()}}}"
    path = tmp_path / "m.yaml"
    for one in ("{verify_tls: false}", f"{{ca_bundle: {pin}}}"):
        with_tls = text.replace("  seed: 7\n", f"  seed: 7\n  request: {one}\n", 1)
        path.write_text(with_tls)
        with pytest.raises(KitError, match="apply to an https server") as e:
            load_manifest(path, allow_unpinned=True)
        assert e.value.exit_code == 3
        path.write_text(with_tls.replace("\nserver:\n", "\nserver:\n  scheme: https\n", 1))
        assert load_manifest(path, allow_unpinned=True).manifest.server.scheme == "https"
