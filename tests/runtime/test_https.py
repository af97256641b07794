"""https on kit's own paths to a server (readiness probe, metrics scrape, the CA file's preflight and the manifest's
rules), against a real TLS server: the standard library's HTTP server wrapped in ssl, with a CA and a server
certificate made here (tests/support/tls.py). The load driver's https is tests/load/test_https.py; a whole
`kit run` over https is tests/e2e/test_https_run.py."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from pydantic import ValidationError
from support.manifests import manifest_data, manifest_model
from support.tls import Pki, make_pki, tls_http_server

from kit.errors import ExitCode, ServerError
from kit.manifest.workload import CaBundle, ca_problem
from kit.plumbing.net import http_ok
from kit.plumbing.tls import TlsClient
from kit.telemetry import scrape_all
from kit.telemetry.prom import ScrapeError, fetch

METRICS = b"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 3\n"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = METRICS if self.path == "/metrics" else json.dumps({"ok": True}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(pki: Pki) -> Iterator[str]:
    with tls_http_server(pki, Handler) as url:
        yield url


def test_verified_against_the_ca_bundle(pki: Pki, server: str) -> None:
    ctx = TlsClient(str(pki.ca)).context()
    assert http_ok(server + "/health", context=ctx)
    assert scrape_all(server + "/metrics", context=ctx) == ({"sglang:num_running_reqs": 3.0}, None)


def test_another_ca_is_refused_at_once_with_exit_7(server: str, tmp_path: Path) -> None:
    other = make_pki(tmp_path, tag="-other")
    with pytest.raises(ServerError, match=r"certificate is refused \(.*unable to get local issuer") as got:
        http_ok(server + "/health", context=TlsClient(str(other.ca)).context())
    assert got.value.exit_code == ExitCode.SERVER_FAILED and got.value.hint and "ca_bundle" in got.value.hint
    with pytest.raises(ServerError, match="certificate is refused"):  # the system's CAs do not know it either
        http_ok(server + "/health", context=TlsClient().context())
    with pytest.raises(ScrapeError, match="CERTIFICATE_VERIFY_FAILED"):
        fetch(server + "/metrics", timeout_s=5, max_bytes=1 << 20, context=TlsClient(str(other.ca)).context())


def test_a_certificate_for_another_address_is_refused(tmp_path: Path) -> None:
    elsewhere = make_pki(tmp_path, ips=("127.0.0.2",), dns=("other.example",))  # kit connects to 127.0.0.1
    with tls_http_server(elsewhere, Handler) as url:
        with pytest.raises(ServerError, match=r"certificate is refused \(IP address mismatch"):
            http_ok(url + "/health", context=TlsClient(str(elsewhere.ca)).context())
        assert http_ok(url + "/health", context=TlsClient(str(elsewhere.ca), verify=False).context())


def test_plain_http_to_a_tls_server_is_no_answer(server: str) -> None:
    assert not http_ok(server.replace("https://", "http://") + "/health")
    assert scrape_all(server + "/metrics")[0] is None  # an https URL is never scraped without the TLS settings


def test_the_ca_file_preflight(pki: Pki, tmp_path: Path) -> None:
    assert ca_problem(CaBundle(**pki.pin())) is None
    both = tmp_path / "both.pem"
    both.write_bytes(pki.ca.read_bytes() + pki.key.read_bytes())
    both_pin = {"path": str(both), "sha256": hashlib.sha256(both.read_bytes()).hexdigest()}
    assert "holds a private key" in str(ca_problem(CaBundle(**both_pin)))
    junk = tmp_path / "junk.pem"
    junk.write_bytes(b"not a certificate\n")
    junk_pin = {"path": str(junk), "sha256": hashlib.sha256(junk.read_bytes()).hexdigest()}
    assert "not a PEM file of CA certificates" in str(ca_problem(CaBundle(**junk_pin)))
    assert "its sha256 is" in str(ca_problem(CaBundle(path=str(pki.ca), sha256="0" * 64)))


def test_the_manifest_rules(pki: Pki) -> None:
    ok = manifest_model(manifest_data(server={"scheme": "https"}, load={"request": {"ca_bundle": pki.pin()}}))
    assert ok.server.scheme == "https" and ok.load.request.ca_bundle is not None
    with pytest.raises(ValidationError, match=r"apply to an https server: set server\.scheme: https"):
        manifest_model(manifest_data(load={"request": {"ca_bundle": pki.pin()}}))
    with pytest.raises(ValidationError, match="apply to an https server"):
        manifest_model(manifest_data(load={"request": {"verify_tls": False}}))
    with pytest.raises(ValidationError, match="nothing would be verified against it"):
        manifest_model(manifest_data(server={"scheme": "https"},
                                     load={"request": {"ca_bundle": pki.pin(), "verify_tls": False}}))
    with pytest.raises(ValidationError, match="instance of CaBundle"):  # a path alone is not pinned
        manifest_model(manifest_data(server={"scheme": "https"}, load={"request": {"ca_bundle": str(pki.ca)}}))


def test_the_report_says_how_the_server_was_reached(tmp_path: Path) -> None:
    from kit.report.workload import connection_section

    level = tmp_path / "cells" / "a-r1" / "level-1"
    level.mkdir(parents=True)

    def section(spec: dict[str, object]) -> str:
        (level / "client.json").write_text(json.dumps({"spec": spec}))
        return "\n".join(connection_section(tmp_path))

    assert section({"base_url": "http://127.0.0.1:1"}) == ""
    assert "verified against `ca.pem`" in section({"base_url": "https://127.0.0.1:1", "ca_bundle": "ca.pem",
                                                    "verify_tls": True})
    assert "the system's CA certificates" in section({"base_url": "https://127.0.0.1:1", "verify_tls": True})
    assert "⚠ UNVERIFIED https" in section({"base_url": "https://127.0.0.1:1", "verify_tls": False})


def test_the_compose_healthcheck_probes_https(server: str) -> None:
    """kit compose's container healthcheck, run as docker would run it, against the TLS server (its own loopback:
    liveness only; kit's probe is the one that verifies)."""
    import subprocess
    import sys

    from kit.compose import _healthcheck

    port = int(server.rsplit(":", 1)[1])
    cmd = _healthcheck(port, "/health", 10, "https")["test"]
    assert isinstance(cmd, list) and cmd[:2] == ["CMD", "python3"]
    assert subprocess.run([sys.executable, *cmd[2:]], capture_output=True, timeout=30, check=False).returncode == 0
    plain = _healthcheck(port, "/health", 10)["test"]
    assert isinstance(plain, list)
    assert subprocess.run([sys.executable, *plain[2:]], capture_output=True, timeout=30, check=False).returncode != 0
