"""https: the driver against a real TLS server (the standard library's HTTP server wrapped in ssl, a certificate made
here with cryptography): verified against a CA bundle it streams and records every request; with the system's CA
certificates the self-signed server is refused (each request an error naming the certificate), and verify_tls off
accepts it."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kit.load import run_level

from ._support import make_spec, read_records
from .test_workload_sending import SEEN, Handler


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kit test server")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@pytest.fixture
def tls_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    SEEN.clear()
    cert, key = self_signed(tmp_path)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"https://127.0.0.1:{srv.server_address[1]}", cert
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("tokens", [40, 3000])  # 3000: a body of ~250 KB, many TLS records per read
def test_https_verified_against_a_ca_bundle(tls_server: tuple[str, Path], tmp_path: Path, tokens: int) -> None:
    url, cert = tls_server
    spec = make_spec(url, concurrency=3, requests=9, warmup_requests=2, output_tokens=tokens, ca_bundle=str(cert))
    res = run_level(spec, tmp_path / "level")
    assert res.ok == 9 and res.errors == 0, read_records(tmp_path / "level" / "records.jsonl")[:1]
    recs = read_records(tmp_path / "level" / "records.jsonl")
    assert all(r["client_tokens"] == r["usage_completion_tokens"] == tokens == len(r["chunk_ns"]) for r in recs)
    assert len(SEEN) == 11


def test_https_refuses_an_unknown_certificate_unless_told(tls_server: tuple[str, Path], tmp_path: Path) -> None:
    from kit.errors import LoadError

    url, _ = tls_server
    with pytest.raises(LoadError, match=r"all 1 warm-up requests failed \(first error: .*CERTIFICATE_VERIFY_FAILED"):
        run_level(make_spec(url, concurrency=1, requests=2, warmup_requests=1), tmp_path / "a")
    res = run_level(make_spec(url, concurrency=1, requests=2, warmup_requests=1, verify_tls=False), tmp_path / "b")
    assert res.ok == 2
