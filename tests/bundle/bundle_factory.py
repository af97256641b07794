"""A small, fake-but-real bundle for the bundle tests: real files, real keys, real signatures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.bundle import Bundle, sign_provenance
from kit.signing import SigningKey

ARMS = ("base", "oea")
LEVELS = (1, 4)


def summarize(root: Path) -> dict[str, Any]:
    """Stand-in for kit.stats.summarize_bundle: counts and mean TTFT per cell and level, from the records."""
    cells: dict[str, Any] = {}
    for rec in sorted(root.glob("cells/*/level-*/records.jsonl")):
        rows = [json.loads(line) for line in rec.read_text().splitlines() if line.strip()]
        ok = [r for r in rows if r["ok"]]
        cells.setdefault(rec.parent.parent.name, {})[rec.parent.name] = {
            "requests": len(rows),
            "ok": len(ok),
            "mean_ttft_ms": sum(r["ttft_ms"] for r in ok) / len(ok) if ok else None,
        }
    return {"cells": cells, "version": 1}


def _records(arm: str, level: int) -> str:
    rows = [{"arm": arm, "level": level, "i": i, "ok": i % 5 != 4, "ttft_ms": 10.0 + i * 0.25 + level,
             "tokens": 16} for i in range(6)]
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)


def fill_cell(b: Bundle, cell_id: str, arm: str) -> None:
    b.cell_dir(cell_id)
    b.write_json(f"cells/{cell_id}/cell.json", {"id": cell_id, "arm": arm, "status": "ok"})
    b.write_bytes(f"cells/{cell_id}/server.log", f"starting {arm}\nready\nstopping\n".encode())
    b.append_jsonl(f"cells/{cell_id}/gates.jsonl", {"phase": "before", "ok": True})
    b.append_jsonl(f"cells/{cell_id}/gates.jsonl", {"phase": "after", "ok": True})
    b.write_json(f"cells/{cell_id}/command.json", {"argv": ["python", "-m", "kit.engine", "--arm", arm]})
    for lv in LEVELS:
        b.write_bytes(f"cells/{cell_id}/level-{lv}/records.jsonl", _records(arm, lv).encode())
        b.write_json(f"cells/{cell_id}/level-{lv}/client.json", {"cpu": 0.1, "client_bound": False})
        b.write_json(f"cells/{cell_id}/level-{lv}/server_metrics.json", {"before": None, "after": None})


def build_bundle(results: Path, key: SigningKey, *, experiment: str = "demo", sign: bool = True) -> Bundle:
    b = Bundle.create(results, experiment)
    b.write_bytes("manifest.yaml", b"name: demo\narms: [base, oea]\n")
    b.write_bytes("manifest.yaml.sig", b'{"payloadType": "application/vnd.in-toto+json"}\n')
    b.write_json("run.json", {"run_id": b.run_id, "experiment": experiment, "kit_version": "0.1.0",
                              "status": "complete", "started": "2025-01-01T00:00:00Z",
                              "finished": "2025-01-01T00:10:00Z", "argv": ["kit", "run", "m.yaml"],
                              "flags": {"allow_unsigned": False, "allow_unpinned": False}})
    b.write_json("plan.json", {"cells": [f"{a}-r1" for a in ARMS], "levels": list(LEVELS)})
    b.write_json("environment.json", {"host": {"name": "test"}, "gpus": []})
    fill_cell(b, "oea-r1", "oea")  # a first attempt that failed and was moved aside on resume
    b.move_failed_attempt("oea-r1")
    for arm in ARMS:
        fill_cell(b, f"{arm}-r1", arm)
    b.write_json("summary.json", summarize(b.root))
    b.write_bytes("report.md", "# demo\n\nbase vs oea: µ-benchmark ✓\n".encode())
    b.write_bytes("plots/ttft.png", bytes(range(256)) * 2)
    b.write_bytes("notes/ünïcode name.txt", b"non-ASCII path\n")
    if sign:
        sign_provenance(b, key, predicate={
            "externalParameters": {"flags": {"allow_unsigned": False}},
            "internalParameters": {"kit": "0.1.0", "runtime": "process", "hardware": {"gpus": 0}},
            "resolvedDependencies": [],
            "metadata": {"startedOn": "2025-01-01T00:00:00Z", "finishedOn": "2025-01-01T00:10:00Z"},
        })
    return b
