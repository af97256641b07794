"""The policy half of verifying a bundle: who signed it, and is that who the user's trust expects for results?

Verification answers "signed by whom, and does my policy allow that key for this namespace?" (as cosign
and in-toto do), never just "is the signature valid". The policy is the user's own trust file
(``~/.config/kit/allowed_signers``) or the files given with ``--trust``; nothing inside or beside the
bundle counts. A bundle's provenance must be signed by a key allowed for ``kit-bundle``; the manifest
signature it carries is re-checked for ``kit-manifest`` and shown, with every flag the run recorded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.bundle.names import PROVENANCE
from kit.bundle.provenance import default_runner_key_path
from kit.errors import BundleError, SignatureError
from kit.files import JsonObject
from kit.files.read import read_file
from kit.files.run import RunFile
from kit.signing import (
    NS_BUNDLE,
    check_envelope,
    describe_policy,
    fingerprint,
    load_trust,
    parse_public_key,
    user_trust_file,
    verify_manifest,
)

NOT_PROOF = "self-declared, not proof of identity"
UNTRUSTED_MARK = "UNTRUSTED"
TRUSTED_MARK = "TRUSTED"


class BundleUntrusted(BundleError):
    """Exit 9: the provenance verifies, but the user's policy does not allow its signer for kit-bundle.
    ``details`` is what ``kit verify --json`` shows for it."""

    def __init__(self, message: str, *, hint: str | None, details: JsonObject) -> None:
        super().__init__(message, hint=hint)
        self.details = details


@dataclass
class SignerDecision:
    """The first line of `kit verify`, and what --json shows of the signers."""

    text: str
    trusted: bool
    signers: list[JsonObject] = field(default_factory=list)


def _comments(env: Mapping[str, Any]) -> dict[str, str]:
    """fingerprint -> the comment of the public key line the envelope carries for it (self-declared)."""
    out: dict[str, str] = {}
    for s in env.get("signatures", []):
        line = s.get("publicKey") if isinstance(s, dict) else None
        if not isinstance(line, str):
            continue
        try:
            fp = fingerprint(parse_public_key(line))
        except SignatureError:
            continue
        parts = line.split(maxsplit=2)
        out[fp] = parts[2] if len(parts) > 2 else ""
    return out


def _who(fp: str, comment: str) -> str:
    return f"{fp} (key comment {comment!r}: {NOT_PROOF})" if comment else f"{fp} (no key comment)"


def _trust_hint(env: Mapping[str, Any], fps: Sequence[str]) -> str:
    key = "ssh-ed25519 KEY"
    for s in env.get("signatures", []):
        line = s.get("publicKey") if isinstance(s, dict) else None
        if isinstance(line, str) and _fp_or_empty(line) in fps:
            key = " ".join(line.split()[:2])
            break
    mine = default_runner_key_path().with_name(default_runner_key_path().name + ".pub")
    try:
        own = mine.is_file() and _fp_or_empty(mine.read_text(errors="replace")) in fps
    except OSError:
        own = False
    if own:  # made by a kit that did not yet add its runner key to the policy
        return (f"that is this machine's own runner key ({mine}); to trust the bundles it signs, add this line to "
                f'{user_trust_file()}: kit-runner namespaces="{NS_BUNDLE}" {key}')
    return (f"to trust this signer for results, first confirm the fingerprint with its owner (the key comment "
            f"proves nothing), then add this line to {user_trust_file()} or to a file you pass with --trust: "
            f'PRINCIPAL namespaces="{NS_BUNDLE}" {key}')


def _fp_or_empty(line: str) -> str:
    try:
        return fingerprint(parse_public_key(line))
    except SignatureError:
        return ""


def decide_trust(env: Mapping[str, Any], body: bytes, files: Sequence[Path], label: str, *,
                 integrity_only: bool = False) -> SignerDecision:
    """Who signed the provenance and whether ``files`` allow that key for kit-bundle.

    Untrusted: BundleUntrusted (exit 9), unless ``integrity_only`` (then no trust decision is made and the
    line says UNTRUSTED). A broken trust file is the caller's problem (exit 2 or 4), not the bundle's."""
    comments = _comments(env)
    keys = load_trust(files) if not integrity_only else []
    try:
        verified = check_envelope(env, body, keys, NS_BUNDLE)
    except SignatureError as e:
        raise BundleError(f"bundle {label} failed verification: {PROVENANCE}: {e.message}") from None
    if verified.invalid:
        raise BundleError(f"bundle {label} failed verification: {PROVENANCE}: signature(s) by "
                          f"{', '.join(verified.invalid)} did not verify")
    signers: list[JsonObject] = [
        {"principal": p, "fingerprint": fp, "comment": comments.get(fp, ""), "trusted_by": src}
        for p, fp, src in verified.trusted]
    signers += [{"fingerprint": fp, "comment": c, "trusted_by": None} for fp, c in verified.untrusted]
    untrusted = [_who(fp, c) for fp, c in verified.untrusted]
    if integrity_only:
        return SignerDecision(f"{UNTRUSTED_MARK} (--integrity-only: no trust decision made): signed by "
                              f"{', '.join(untrusted)}", False, signers)
    if verified.trusted:
        who = "; ".join(f"{_who(fp, comments.get(fp, ''))}, trusted for {NS_BUNDLE} as {p!r} by {src}"
                        for p, fp, src in verified.trusted)
        also = f"; also signed by {', '.join(untrusted)}, which your policy does not trust" if untrusted else ""
        return SignerDecision(f"{TRUSTED_MARK}: signed by {who}{also}", True, signers)
    first = (f"{UNTRUSTED_MARK}: bundle {label} is signed by {', '.join(untrusted)}, which your policy does not "
             f"allow for {NS_BUNDLE} ({describe_policy(files)})")
    refusals = "".join(f"\n  {r}" for r in verified.refusals[:10])
    details: JsonObject = {"bundle": label, "trust": UNTRUSTED_MARK, "trusted": False, "signers": signers,
                           "verdict": first}
    raise BundleUntrusted(first + refusals, hint=_trust_hint(env, [fp for fp, _ in verified.untrusted]),
                          details=details)


def manifest_check(root: Path, files: Sequence[Path], label: str | None = None) -> JsonObject:
    """The bundle's manifest.yaml.sig re-verified under the current policy (kit-manifest); never fails the
    bundle (the runner vouched for what ran), but says plainly whether your policy trusts who approved it.
    ``label``: the bundle as the user named it, for the private copy ``root`` in what is said (an archive's
    extraction is gone once kit verify answers)."""
    sig_path, manifest = root / "manifest.yaml.sig", root / "manifest.yaml"
    if not manifest.is_file():
        return {"status": "no manifest.yaml in the bundle", "trusted": False}
    if not sig_path.is_file():
        return {"status": "UNSIGNED (the bundle holds no manifest.yaml.sig)", "trusted": False}
    try:
        mt = verify_manifest(manifest, manifest.read_bytes(), list(files), sig_path.read_bytes())
    except SignatureError as e:
        said = e.message.splitlines()[0]
        if label is not None:
            said = said.replace(str(root), label)
        return {"status": f"NOT trusted under your policy: {said}", "trusted": False}
    who = ", ".join(f"{p} ({fp}, trusted by {src})" for p, fp, src in mt.signers)
    return {"status": f"signed by {who}", "trusted": True}


def recorded_flags(root: Path) -> JsonObject:
    """Every flag run.json records (the start and each resume), and what the run itself claimed of trust."""
    try:
        run = read_file(root, "run.json", RunFile)
    except BundleError:
        return {}
    flags: JsonObject = {"allow_unsigned": run.flags.allow_unsigned, "allow_unpinned": run.flags.allow_unpinned}
    extra = run.flags.model_extra or {}
    flags.update({k: v for k, v in extra.items() if k.startswith("allow_")})
    return {"flags": flags, "claimed_signed": run.trust.get("signed"),
            "claimed_allow_unsigned": run.trust.get("allow_unsigned")}


def flags_line(rec: Mapping[str, Any]) -> str:
    flags = rec.get("flags") or {}
    if not flags:
        return "recorded flags: none readable (run.json)"
    text = ", ".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(flags.items()))
    warn = ""
    if flags.get("allow_unsigned") or rec.get("claimed_allow_unsigned"):
        warn = "; this run was made with --allow-unsigned: nobody had to approve the manifest it ran"
    if flags.get("allow_unpinned"):
        warn += "; made with --allow-unpinned: image bases were not pinned by digest"
    return f"recorded flags: {text}{warn}"
