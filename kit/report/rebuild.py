"""``kit report BUNDLE``: recompute a bundle's summary from its records, re-render the report, re-sign."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from kit.bundle import Bundle, runner_key, sign_provenance, verify_for_resume
from kit.files.summary import Summary
from kit.plumbing.interrupts import deferred_interrupts
from kit.report import render_report
from kit.stats import summarize_bundle


def rebuild(root: Path, key: Path | None = None) -> list[str]:
    """Recompute summary.json, rewrite report.md and plots, re-sign keeping the old provenance's parameters."""
    bundle = Bundle.open(root)
    # never re-sign what somebody changed, nor vouch for what a runner you do not trust signed: exit 9
    verify_for_resume(bundle.root, [])
    prov = bundle.path("provenance.dsse.json")
    old = json.loads(prov.read_text()) if prov.exists() else None
    summary = summarize_bundle(bundle.root)
    signer, notice = runner_key(key)  # before the provenance goes: a bad key leaves the bundle as it was
    # From removing the provenance to signing the new one the bundle is unsealed: Ctrl-C, SIGTERM or SIGHUP there
    # would leave a finished bundle that neither verifies nor can be re-reported; they wait until it is re-signed.
    with deferred_interrupts():
        bundle.remove_provenance()
        bundle.write_json("summary.json", summary)
        written = render_report(bundle.root, Summary.model_validate(summary))
        sign_provenance(bundle, signer, predicate=_old_predicate(old))
    lines = [notice] if notice else []
    lines += [f"wrote {p.relative_to(bundle.root)}" for p in written]
    lines.append(f"re-signed provenance with {signer.fingerprint}")
    return lines


def _old_predicate(envelope: dict[str, object] | None) -> dict[str, object]:
    if not envelope:
        return {}
    try:
        stmt = json.loads(base64.b64decode(str(envelope["payload"])))
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
