"""Result bundles: layout and atomic writing, signed provenance, verification, deterministic archives.

A bundle is a directory (``results/<experiment>-<UTC time>-<6 hex>/``) that is written as things
happen and sealed by ``provenance.dsse.json``: a DSSE-signed in-toto Statement whose subjects are
every other file with its sha256. ``verify_bundle`` checks a directory or a ``.tar.gz`` of one.
"""

from kit.bundle.extract import MAX_MEMBERS, MAX_TOTAL_BYTES, extracted, safe_extract
from kit.bundle.layout import Bundle
from kit.bundle.names import PROVENANCE
from kit.bundle.policy import BundleUntrusted, SignerDecision
from kit.bundle.provenance import (
    BUILD_TYPE,
    SLSA_PROVENANCE_V1,
    default_runner_key_path,
    envelope_bytes,
    runner_key,
    runner_trust_line,
    sign_provenance,
)
from kit.bundle.tarball import archive, archive_sha256
from kit.bundle.verify import VerifyResult, first_difference, verify_bundle, verify_for_resume, verify_integrity

__all__ = [
    "BUILD_TYPE",
    "MAX_MEMBERS",
    "MAX_TOTAL_BYTES",
    "PROVENANCE",
    "SLSA_PROVENANCE_V1",
    "Bundle",
    "BundleUntrusted",
    "SignerDecision",
    "VerifyResult",
    "archive",
    "archive_sha256",
    "default_runner_key_path",
    "envelope_bytes",
    "extracted",
    "first_difference",
    "runner_key",
    "runner_trust_line",
    "safe_extract",
    "sign_provenance",
    "verify_bundle",
    "verify_for_resume",
    "verify_integrity",
]
