"""Signed provenance: one DSSE envelope over an in-toto Statement v1 naming every file of the bundle.

The predicate is SLSA Provenance v1 (https://slsa.dev/spec/v1.0/provenance) with a benchmark run
as the "build". The caller passes what it knows (parameters, images, timestamps); this module
adds what the bundle itself says (every file's sha256, the manifest digest, the logs) and who
signed (``runDetails.builder.kit_signer``, so the signer's key comment is covered by the signature).
"""

from __future__ import annotations

import os
import platform
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kit import __version__
from kit.bundle.checkpoints import Checkpointer, checkpoint_files, read_chain
from kit.bundle.layout import Bundle
from kit.bundle.names import PROVENANCE, envelope_bytes
from kit.bundle.subjects import add_sizes
from kit.errors import BundleError, UsageError
from kit.files import JsonObject
from kit.plumbing.files import sha256_file
from kit.signing import (
    NS_BUNDLE,
    SigningKey,
    add_user_trust,
    generate_key,
    load_signing_key,
    sign_payload,
    statement,
    user_trust_file,
)

SLSA_PROVENANCE_V1 = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "urn:kit:benchmark-run:1"
RUNNER_KEY_NAME = "runner_ed25519"
PREDICATE_PIECES = frozenset(
    {"externalParameters", "internalParameters", "resolvedDependencies", "metadata", "builderVersion", "byproducts"}
)


def sign_provenance(bundle: Bundle, key: SigningKey, *, predicate: Mapping[str, Any],
                    checkpoints: Checkpointer | None = None, status: str | None = None) -> Path:
    """Hash every file, sign the statement with ``key`` and write provenance.dsse.json.

    A bundle with checkpoints first gets its "end" checkpoint (``status``: how the run ended), continuing
    ``checkpoints`` (or the chain on disk, which must then verify whole), so that the chain holds every file.

    ``predicate`` holds the caller's pieces, all optional: ``externalParameters`` (dict, e.g. flags
    and argv; ``manifest`` is filled in from the bundle's manifest.yaml), ``internalParameters``
    (dict: kit version, runtime, hardware), ``resolvedDependencies`` (list of ResourceDescriptors,
    e.g. images), ``metadata`` (invocationId, startedOn, finishedOn; invocationId defaults to the
    run id), ``builderVersion`` (dict added to {kit, python}) and ``byproducts`` (extra
    ResourceDescriptors; every ``*.log`` file is listed automatically).
    """
    unknown = set(predicate) - PREDICATE_PIECES
    if unknown:
        raise ValueError(f"unknown provenance pieces {sorted(unknown)}; known: {sorted(PREDICATE_PIECES)}")
    if checkpoints is None and checkpoint_files(bundle.root):
        chain = read_chain(bundle.root, None)
        if chain.stopped:
            raise BundleError(f"{bundle.root}: its checkpoint chain is broken ({chain.stopped})",
                              hint=f"check it with `kit verify {bundle.root}`")
        checkpoints = Checkpointer(bundle, key, chain)
    known: dict[str, tuple[str, int]] = {}
    if checkpoints is not None:
        checkpoints.sign("end", status=status)
        known = checkpoints.vouched
    hashed = {rel: known[rel] if rel in known else sha256_file(bundle.root / rel) for rel in bundle.files()}
    digests = {rel: digest for rel, (digest, _) in hashed.items()}
    # sizes are signed too: a verifier streaming an archive refuses a member the moment it outgrows its size
    body = add_sizes(statement(digests, SLSA_PROVENANCE_V1, build_predicate(bundle, digests, key, predicate)),
                     {rel: size for rel, (_, size) in hashed.items()})
    return bundle.write_bytes(PROVENANCE, envelope_bytes(sign_payload(body, key)))


def build_predicate(
    bundle: Bundle, digests: Mapping[str, str], key: SigningKey, pieces: Mapping[str, Any]
) -> JsonObject:
    external = dict(pieces.get("externalParameters") or {})
    if "manifest.yaml" in digests:
        external["manifest"] = {"path": "manifest.yaml", "digest": {"sha256": digests["manifest.yaml"]}}
    metadata = {k: v for k, v in dict(pieces.get("metadata") or {}).items() if v is not None}
    metadata.setdefault("invocationId", bundle.run_id)
    logs = [{"name": rel, "digest": {"sha256": d}} for rel, d in sorted(digests.items()) if rel.endswith(".log")]
    return {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": external,
            "internalParameters": dict(pieces.get("internalParameters") or {}),
            "resolvedDependencies": list(pieces.get("resolvedDependencies") or []),
        },
        "runDetails": {
            "builder": {
                "id": f"urn:kit:runner:{socket.gethostname()}",
                "version": {"kit": __version__, "python": platform.python_version(),
                            **dict(pieces.get("builderVersion") or {})},
                "kit_signer": {"keyid": key.fingerprint, "publicKey": key.public_line()},
            },
            "metadata": metadata,
            "byproducts": logs + list(pieces.get("byproducts") or []),
        },
    }


def default_runner_key_path() -> Path:
    """``$XDG_CONFIG_HOME/kit/runner_ed25519`` (default ``~/.config/kit/runner_ed25519``)."""
    return user_trust_file().parent / RUNNER_KEY_NAME


def runner_key(path: Path | None) -> tuple[SigningKey, str | None]:
    """The key that signs bundles, and a notice to print when it was just generated.

    ``path`` given: load it (KIT_KEY_PASSPHRASE unlocks it). Otherwise load the default runner key,
    generating it the first time (comment ``kit-runner@<hostname>``, encrypted when KIT_KEY_PASSPHRASE is
    set) and adding it to the user's trust file for ``kit-bundle`` only: bundles signed on this machine
    then verify here, and nowhere else until someone trusts the key there. It never approves manifests.
    """
    passphrase = os.environ.get("KIT_KEY_PASSPHRASE")
    if path is not None:
        return load_signing_key(path, passphrase), None
    default = default_runner_key_path()
    if default.exists():
        return load_signing_key(default, passphrase), None
    fix = (f"give the key to sign with, --key FILE (`kit keygen -o FILE` makes one), or let kit make its own: "
           f"make {default.parent} a directory you can write, or set XDG_CONFIG_HOME to one")
    blocked = _not_a_directory(default.parent)
    if blocked is not None:
        raise UsageError(f"cannot make the runner key {default}: {blocked} is not a directory", hint=fix)
    who = f"kit-runner@{socket.gethostname()}"
    try:
        key = generate_key(default, who, passphrase=passphrase or None)
    except UsageError as e:  # its hint is keygen's (-o), which this command has not
        raise UsageError(e.message, hint=fix) from None
    line = runner_trust_line(key)
    trust = add_user_trust(line)
    notice = (f"generated runner key {default} ({key.fingerprint}) and trusted it for {NS_BUNDLE} only in {trust}; "
              f"elsewhere, its bundles verify once this line is added to a trust file there: {line}")
    return key, notice


def _not_a_directory(path: Path) -> Path | None:
    """The nearest of ``path`` and the directories above it that is there and not a directory (a file where
    ``$XDG_CONFIG_HOME/kit`` should be), which makes ``path`` impossible; None where there is none."""
    for at in (path, *path.parents):
        if os.path.lexists(at):
            return None if at.is_dir() else at
    return None


def runner_trust_line(key: SigningKey) -> str:
    """The allowed_signers line that lets ``key`` vouch for bundles (namespace kit-bundle), nothing else."""
    principal = key.comment if key.comment and " " not in key.comment else "kit-runner"
    return f'{principal} namespaces="{NS_BUNDLE}" {key.public_line()}'
