"""Writes experiments/data/sharegpt-devil.json and prompts-devil.jsonl: small ShareGPT-format and JSONL prompt files
made from the shipped corpus (The Devil's Dictionary, public domain), for the signed dataset manifests and CI.
Deterministic: `python scripts/make_workload_data.py` rewrites the same bytes (their sha256 is pinned in
experiments/workload-*.yaml)."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kit.workload.corpus import corpus_text  # noqa: E402 - after the path


def main() -> None:
    words = corpus_text().split()
    rng = random.Random(2026)

    def run(k: int) -> str:
        s = rng.randrange(len(words) - k)
        return " ".join(words[s:s + k])

    convs = []
    for n in range(48):
        turns = [{"from": "human" if t % 2 == 0 else "gpt", "value": run(rng.randint(8, 60))}
                 for t in range(rng.choice([1, 2, 2, 4]))]
        convs.append({"id": f"devil-{n}", "conversations": turns})
    out = ROOT / "experiments" / "data"
    out.mkdir(parents=True, exist_ok=True)
    (out / "sharegpt-devil.json").write_text(json.dumps(convs, indent=1) + "\n", encoding="utf-8")
    lines = []
    for n in range(24):
        if n % 3 == 2:
            rec: dict[str, object] = {"messages": [{"role": "system", "content": run(12)},
                                                   {"role": "user", "content": run(rng.randint(5, 40))}]}
        else:
            rec = {"prompt": run(rng.randint(5, 40))}
        if n % 2:
            rec["output_tokens"] = rng.randint(4, 24)
        lines.append(json.dumps(rec))
    (out / "prompts-devil.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
