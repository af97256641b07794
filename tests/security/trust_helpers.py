"""Shared pieces of the trust tests (issue 9): keys, bundles signed by a runner, the user's trust file."""

from __future__ import annotations

import json
from pathlib import Path

from support.bundles import build_bundle

from kit.bundle import Bundle, sign_provenance
from kit.signing import SigningKey, generate_key, user_trust_file
from kit.stats import summarize_bundle

ROOT = Path(__file__).resolve().parents[2]
PROV = "provenance.dsse.json"


def key(tmp: Path, name: str, comment: str) -> SigningKey:
    return generate_key(tmp / "keys" / name, comment)


def trust_user(k: SigningKey, namespace: str, principal: str = "someone") -> Path:
    """Add ``k`` to the (isolated) user's ~/.config/kit/allowed_signers for ``namespace``."""
    path = user_trust_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(f'{principal} namespaces="{namespace}" {k.public_line()}\n')
    return path


def bundle(tmp: Path, runner: SigningKey) -> Bundle:
    return build_bundle(tmp / "results", runner)


def forge(b: Bundle, forger: SigningKey) -> None:
    """The attack of issue 9: halve every latency in the records, recompute summary.json, re-sign the
    provenance with ``forger`` (whose key comment may copy the real runner's)."""
    b.remove_provenance()
    for rec in b.root.glob("cells/oea-r*/level-*/records.jsonl"):
        lines = []
        for line in rec.read_text().splitlines():
            r = json.loads(line)
            if r.get("ttft_ns"):
                r["ttft_ns"] //= 2
                r["e2e_ns"] //= 2
                r["chunk_ns"] = [c // 2 for c in r["chunk_ns"]]
            lines.append(json.dumps(r))
        rec.write_text("\n".join(lines) + "\n")
    b.write_json("summary.json", summarize_bundle(b.root))
    sign_provenance(b, forger, predicate={})


def resign(b: Bundle, signer: SigningKey) -> None:
    b.remove_provenance()
    sign_provenance(b, signer, predicate={})


def set_run_flags(b: Bundle, **flags: bool) -> None:
    run = json.loads(b.path("run.json").read_text())
    run["flags"] = {**run.get("flags", {}), **flags}
    b.path("run.json").write_text(json.dumps(run))
