"""Review 2: ``load.request.ca_bundle`` and ``verify_tls`` are accepted and signed, but ``kit run`` can never speak
https: the runtime's base URL is always ``http://host:port`` (kit/runtime/__init__.py ``base_url``), the manifest has
no scheme, and the telemetry scraper refuses anything but http. The TLS settings are dead: a user who pins a CA bundle
believes the run verified the server, and it talked plain http. Either a way to say https, or a refusal."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.errors import KitError
from kit.manifest.loading import load_manifest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.xfail(strict=True, reason="review2: TLS settings accepted although kit run only speaks http")
def test_tls_settings_without_an_https_server_are_refused(tmp_path: Path) -> None:
    text = (ROOT / "experiments" / "demo.yaml").read_text()
    assert "  seed: 7\n" in text
    text = text.replace("  seed: 7\n", "  seed: 7\n  request: {verify_tls: false, ca_bundle: ca.pem}\n", 1)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(KitError):
        load_manifest(path, allow_unpinned=True)
