"""A throwaway certificate authority for https tests (the ``cryptography`` package): a CA, a server certificate
it signs for given IP addresses / DNS names, and a ThreadingHTTPServer wrapped in TLS serving a handler."""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import ssl
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca: Path      # the CA certificate (public)
    cert: Path    # the server certificate, signed by the CA
    key: Path     # the server's private key

    def pin(self) -> dict[str, str]:
        """load.request.ca_bundle for a manifest."""
        return {"path": str(self.ca), "sha256": hashlib.sha256(self.ca.read_bytes()).hexdigest()}


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_pki(tmp: Path, *, ips: Sequence[str] = ("127.0.0.1",), dns: Sequence[str] = (), tag: str = "") -> Pki:
    """A fresh CA and a server certificate for ``ips`` and ``dns``, as PEM files under ``tmp``."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name(f"kit test CA{tag}")).issuer_name(_name(f"kit test CA{tag}"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    names += [x509.DNSName(d) for d in dns]
    cert = (x509.CertificateBuilder().subject_name(_name("kit test server")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    tmp.mkdir(parents=True, exist_ok=True)
    pki = Pki(ca=tmp / f"ca{tag}.pem", cert=tmp / f"server{tag}.pem", key=tmp / f"server{tag}.key")
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    pki.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pki.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return pki


@contextmanager
def tls_http_server(pki: Pki, handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``https://127.0.0.1:PORT`` of a threaded HTTP server speaking TLS with ``pki``'s server certificate."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki.cert, pki.key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"https://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
