"""``load.request.ca_bundle`` and ``verify_tls`` are refused by the manifest (exit 3) while ``kit run`` cannot speak
https: the runtime's base URL is always ``http://host:port`` (kit/runtime/__init__.py ``base_url``), the manifest has
no scheme, and the telemetry scraper refuses anything but http. Review 2 found them accepted and signed, doing nothing.
The shipped demo manifest, loaded for real, is the starting point."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.errors import KitError
from kit.manifest.loading import load_manifest

ROOT = Path(__file__).resolve().parents[2]


def test_tls_settings_without_an_https_server_are_refused(tmp_path: Path) -> None:
    text = (ROOT / "experiments" / "demo.yaml").read_text()
    assert "  seed: 7\n" in text
    text = text.replace("  seed: 7\n", "  seed: 7\n  request: {verify_tls: false, ca_bundle: ca.pem}\n", 1)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(KitError, match="kit run cannot reach yet") as e:
        load_manifest(path, allow_unpinned=True)
    assert e.value.exit_code == 3
    for one in ("{verify_tls: false}", "{ca_bundle: ca.pem}"):
        path.write_text(text.replace("{verify_tls: false, ca_bundle: ca.pem}", one))
        with pytest.raises(KitError, match="ca_bundle and verify_tls"):
            load_manifest(path, allow_unpinned=True)
    path.write_text(text.replace("{verify_tls: false, ca_bundle: ca.pem}", "{verify_tls: true}"))
    assert load_manifest(path, allow_unpinned=True) is not None
