"""``kit report BUNDLE``: recompute a bundle's summary from its records, re-render the report, re-sign."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from kit.allowed_signers import decide
from kit.bundle import Bundle, runner_key, runner_trust_line, sign_provenance, verify_for_resume
from kit.errors import BundleError
from kit.files.summary import Summary
from kit.plumbing.files import atomic_write
from kit.plumbing.interrupts import deferred_interrupts
from kit.plumbing.jsontypes import loads
from kit.report import render_report
from kit.signing import NS_BUNDLE, SigningKey, describe_policy, load_trust, policy_files
from kit.stats import summarize_bundle


def rebuild(root: Path, key: Path | None = None, trust: Sequence[Path] = ()) -> list[str]:
    """Recompute summary.json, rewrite report.md and plots; re-sign, keeping the old provenance's parameters, only
    where a byte of them changed (else the runner's signature stays as it was), and only with a key the policy
    (``trust``: kit.signing.trust_policy's files) allows for kit-bundle: a bundle kit re-signed must verify here."""
    bundle = Bundle.open(root, clean=False)
    # never re-sign what somebody changed, nor vouch for what a runner you do not trust signed: exit 9, the bundle
    # untouched; only then the temp files of interrupted writes (an interrupted report's) go, each one named
    was = verify_for_resume(bundle.root, list(trust), temp_files=True)
    removed = bundle.remove_stale_temp_files()
    prov = bundle.path("provenance.dsse.json")
    old = loads(prov.read_text()) if prov.exists() else None
    summary = summarize_bundle(bundle.root)
    # From removing the provenance to signing the new one the bundle is unsealed: Ctrl-C, SIGTERM or SIGHUP there
    # would leave a finished bundle that neither verifies nor can be re-reported; they wait until it is re-signed.
    # Whatever fails in between (a figure, a full disk) puts the bundle back as it was, sealed by its old provenance.
    with deferred_interrupts():
        before = _derived(bundle.root)
        try:
            bundle.remove_provenance()
            bundle.write_json("summary.json", summary)
            written = render_report(bundle.root, Summary.model_validate(summary))
            same = _derived(bundle.root) == {k: v for k, v in before.items() if k != "provenance.dsse.json"}
            if same:
                atomic_write(prov, before["provenance.dsse.json"])  # back: it seals these very bytes
            else:
                signer, notice = runner_key(key)  # only now: nothing to sign, no key read (or made)
                _refuse_untrusted(signer, trust)  # raised here: the bundle is put back as it was
                sign_provenance(bundle, signer, predicate=_old_predicate(old))
        except BaseException:
            _restore(bundle.root, before)
            raise
    lines = [f"removed {rel}: the temp file of an interrupted write, not in the signed provenance" for rel in removed]
    if same:
        return [*lines, "summary.json, report.md and the plots came out byte for byte as signed: nothing rewritten, "
                        f"the provenance stays as signed ({was.text})"]
    lines = ([notice] if notice else []) + lines
    lines += [f"wrote {p.relative_to(bundle.root)}" for p in written]
    lines.append(f"re-signed provenance with {signer.fingerprint}")
    gone = [str(s["fingerprint"]) for s in was.signers if s.get("fingerprint") != signer.fingerprint]
    if gone:
        lines.append(f"note: it was signed by {', '.join(gone)}; where only that key is trusted, this bundle no longer "
                     "verifies (share the original, or ask them to trust the new key)")
    return lines


def _refuse_untrusted(signer: SigningKey, trust: Sequence[Path]) -> None:
    """Exit 9 when the policy does not allow ``signer`` for kit-bundle: the re-signed bundle would no longer verify
    here (the caller puts everything back as it was)."""
    files = policy_files(list(trust))
    if decide(load_trust(files), signer.public, None, NS_BUNDLE, datetime.now(UTC)):
        return
    raise BundleError(
        f"kit report would re-sign {signer.fingerprint} ({signer.path}), which your policy does not allow for "
        f"{NS_BUNDLE} ({describe_policy(files)}): the bundle would no longer verify here; it was left as it was",
        hint=f"give --key a runner key your policy trusts, or, after checking the key is yours, add this line to a "
             f"trust file: {runner_trust_line(signer)}")


def _derived(root: Path) -> dict[str, bytes]:
    """The bytes of what a report rewrites (summary, report, plots) and of the provenance that seals them."""
    rels = ["provenance.dsse.json", "summary.json", "report.md"]
    plots = root / "plots"
    if plots.is_dir() and not plots.is_symlink():
        rels += sorted(p.relative_to(root).as_posix() for p in plots.rglob("*") if p.is_file() and not p.is_symlink())
    return {rel: (root / rel).read_bytes() for rel in rels if (root / rel).is_file()}


def _restore(root: Path, before: dict[str, bytes]) -> None:
    """Put back exactly ``before``: files it holds rewritten, plots it did not hold removed, the provenance last."""
    plots = root / "plots"
    if plots.is_dir() and not plots.is_symlink():
        for p in sorted(plots.rglob("*"), reverse=True):
            rel = p.relative_to(root).as_posix()
            if p.is_file() and rel not in before:
                p.unlink()
            elif p.is_dir() and not any(p.iterdir()):
                p.rmdir()
    for rel in ("summary.json", "report.md"):
        if rel not in before:
            (root / rel).unlink(missing_ok=True)
    for rel, data in sorted(before.items(), key=lambda kv: kv[0] == "provenance.dsse.json"):
        atomic_write(root / rel, data)


def _old_predicate(envelope: dict[str, object] | None) -> dict[str, object]:
    if not envelope:
        return {}
    try:
        stmt = loads(base64.b64decode(str(envelope["payload"])))
        pred = stmt.get("predicate", {})
        bd = pred.get("buildDefinition", {})
        return {k: v for k, v in {
            "externalParameters": bd.get("externalParameters"),
            "internalParameters": bd.get("internalParameters"),
            "resolvedDependencies": bd.get("resolvedDependencies"),
            "metadata": pred.get("runDetails", {}).get("metadata"),
        }.items() if v is not None}
    except (KeyError, ValueError, TypeError):
        return {}
