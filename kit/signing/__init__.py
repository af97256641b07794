"""Signing: OpenSSH Ed25519 keys, DSSE envelopes, and trust in OpenSSH's ``allowed_signers`` format.

A signature is a DSSE envelope (https://github.com/secure-systems-lab/dsse) whose payload is an
in-toto Statement v1 naming the signed file by its sha256. Researchers sign with their existing
``ssh-ed25519`` keys. A signature only counts when its key is allowed by a trust file for the right
namespace (``kit-manifest`` for manifests, ``kit-bundle`` for result bundles), decided exactly as
``ssh-keygen -Y verify`` decides (``kit.allowed_signers``).

    keys       key files, public key lines, fingerprints
    dsse       envelopes, PAE, in-toto statements
    trust      allowed_signers files and the per-signature trust decision
    manifests  detached manifest signatures and their verification
"""

from kit.signing.dsse import (
    PAYLOAD_TYPE,
    STATEMENT_TYPE,
    Envelope,
    SignatureEntry,
    pae,
    parse_envelope,
    sha256_hex,
    sign_payload,
    statement,
    subject_annotations,
    subject_digests,
)
from kit.signing.keys import (
    SigningKey,
    fingerprint,
    generate_key,
    load_signing_key,
    parse_public_key,
    public_key_line,
)
from kit.signing.manifests import (
    MANIFEST_PREDICATE,
    SIG_SUFFIX,
    Contexts,
    ManifestTrust,
    check_contexts,
    sign_manifest,
    signature_path,
    verify_manifest,
)
from kit.signing.trust import (
    NS_BUNDLE,
    NS_MANIFEST,
    Verified,
    add_user_trust,
    check_envelope,
    default_trust_files,
    describe_policy,
    load_trust,
    policy_files,
    read_trust_file,
    trust_flags,
    trust_problems,
    user_trust_file,
)

__all__ = [
    "MANIFEST_PREDICATE",
    "NS_BUNDLE",
    "NS_MANIFEST",
    "PAYLOAD_TYPE",
    "SIG_SUFFIX",
    "STATEMENT_TYPE",
    "Contexts",
    "Envelope",
    "ManifestTrust",
    "SignatureEntry",
    "SigningKey",
    "Verified",
    "add_user_trust",
    "check_contexts",
    "check_envelope",
    "default_trust_files",
    "describe_policy",
    "fingerprint",
    "generate_key",
    "load_signing_key",
    "load_trust",
    "pae",
    "parse_envelope",
    "parse_public_key",
    "policy_files",
    "public_key_line",
    "read_trust_file",
    "sha256_hex",
    "sign_manifest",
    "sign_payload",
    "signature_path",
    "statement",
    "subject_annotations",
    "subject_digests",
    "trust_flags",
    "trust_problems",
    "user_trust_file",
    "verify_manifest",
]
