"""Result bundles: layout and atomic writing, signed provenance, verification, deterministic archives.

A bundle is a directory (``results/<experiment>-<UTC time>-<6 hex>/``) that is written as things
happen and sealed by ``provenance.dsse.json``: a DSSE-signed in-toto Statement whose subjects are
every other file with its sha256. ``verify_bundle`` checks a directory or an archive of one (``is_archive``: named
.tar.gz/.tgz, or gzip's bytes whatever its name). Until then,
``checkpoints/`` holds a signed statement per completed cell, chained to the one before (``checkpoints``); a
resume trusts the verified prefix of that chain, never an unsigned file (``resume``).
"""

from kit.bundle.checkpoints import Checkpointer, check_chain, read_chain
from kit.bundle.diff import first_difference
from kit.bundle.extract import MAX_MEMBERS, MAX_TOTAL_BYTES, extracted, is_archive, safe_extract
from kit.bundle.layout import Bundle
from kit.bundle.names import PROVENANCE, envelope_bytes
from kit.bundle.policy import BundleUntrusted, SignerDecision
from kit.bundle.provenance import (
    BUILD_TYPE,
    SLSA_PROVENANCE_V1,
    default_runner_key_path,
    runner_key,
    runner_trust_line,
    sign_provenance,
)
from kit.bundle.resume import Reconciled, ResumeTrust, reconcile, resume_trust, verify_for_resume, verify_integrity
from kit.bundle.tarball import archive, archive_sha256
from kit.bundle.verify import VerifyResult, verify_bundle

__all__ = [
    "BUILD_TYPE",
    "MAX_MEMBERS",
    "MAX_TOTAL_BYTES",
    "PROVENANCE",
    "SLSA_PROVENANCE_V1",
    "Bundle",
    "BundleUntrusted",
    "Checkpointer",
    "Reconciled",
    "ResumeTrust",
    "SignerDecision",
    "VerifyResult",
    "archive",
    "archive_sha256",
    "check_chain",
    "default_runner_key_path",
    "envelope_bytes",
    "extracted",
    "first_difference",
    "is_archive",
    "read_chain",
    "reconcile",
    "resume_trust",
    "runner_key",
    "runner_trust_line",
    "safe_extract",
    "sign_provenance",
    "verify_bundle",
    "verify_for_resume",
    "verify_integrity",
]
