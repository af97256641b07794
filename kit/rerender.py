"""`kit report`: recompute a bundle's summary from its records, re-render the report, re-sign."""

from __future__ import annotations

import json
from pathlib import Path

from kit.bundle import Bundle, runner_key, sign_provenance, verify_integrity
from kit.report import render_report
from kit.stats import summarize_bundle


def rerender(root: Path, key: Path | None = None) -> list[str]:
    bundle = Bundle.open(root)
    verify_integrity(bundle.root)  # never re-sign what somebody changed: exit 9 naming the file
    old = json.loads(bundle.path("provenance.dsse.json").read_text()) if bundle.path("provenance.dsse.json").exists() \
        else None
    summary = summarize_bundle(bundle.root)
    bundle.remove_provenance()
    bundle.write_json("summary.json", summary)
    written = render_report(bundle.root, summary)
    signer, notice = runner_key(key)
    predicate = _old_predicate(old)
    sign_provenance(bundle, signer, predicate=predicate)
    lines = [notice] if notice else []
    lines += [f"wrote {p.relative_to(bundle.root)}" for p in written]
    lines.append(f"re-signed provenance with {signer.fingerprint}")
    return lines


def _old_predicate(envelope: dict[str, object] | None) -> dict[str, object]:
    if not envelope:
        return {}
    import base64

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
