"""https clients: the one SSL context of every path kit takes to an https server (readiness probe, server_info,
metrics scrapes and the telemetry sampler, the quality check), and the one reading of a refused certificate. The
load driver builds the same context in its own process from the same two settings (``kit.load.driver_tls``)."""

from __future__ import annotations

import functools
import ssl
import urllib.error
from dataclasses import dataclass

from kit.errors import ServerError

REFUSED_HINT = ("give load.request.ca_bundle the PEM of the CA that signed the server's certificate (pinned by its "
                "sha256), and a certificate that names the address kit connects to (server.host, as an IP "
                "subjectAltName); verify_tls: false accepts any certificate and is recorded as unverified")


@dataclass(frozen=True)
class TlsClient:
    """How kit verifies an https server: against ``ca_file`` (PEM CA certificates; None: the system's), the
    server's name checked, unless ``verify`` is off (then anything is accepted: the run records it as unverified)."""

    ca_file: str | None = None
    verify: bool = True

    def context(self) -> ssl.SSLContext:
        return _context(self.ca_file, self.verify)


@functools.lru_cache(maxsize=8)
def _context(ca_file: str | None, verify: bool) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca_file)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def refused_certificate(exc: BaseException) -> str | None:
    """Why the server's certificate was refused, when ``exc`` (or the URLError around it) says it was: an
    unknown CA, a name that does not match, an expired certificate. None for any other failure."""
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ssl.SSLCertVerificationError):
        return str(getattr(reason, "verify_message", None) or reason)
    return None


def refused(url: str, why: str) -> ServerError:
    """The error of a server whose certificate kit refuses: asking again cannot change it."""
    return ServerError(f"{url}: the server's certificate is refused ({why})", hint=REFUSED_HINT)


__all__ = ["TlsClient", "refused", "refused_certificate"]
