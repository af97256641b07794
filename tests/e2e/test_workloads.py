"""Every dataset kind's signed manifest (experiments/workload-*.yaml, and the demo on real text) run end to end by
`kit run` against kit's real engine: the workload written into the bundle, each record naming the line it sent,
the engine's own usage.prompt_tokens equal to the workload's count on every request, and each dataset's shape
checked from the bundle's files (not from kit's code). The engine counts one token per word (kit.engine.tokenizer),
so the independent count here is a word count."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_helpers import ROOT, bundle_of, kit, own_network, read_json

pytestmark = pytest.mark.slow
TRUST = str(ROOT / "allowed_signers")


def words(messages: list[dict[str, str]]) -> int:
    return len("\n".join(m["content"] for m in messages).split())


def run_shipped(path: Path, out: Path, env: dict[str, str]) -> tuple[Path, dict[str, Any]]:
    r = kit("run", "--trust", TRUST, str(path), "--out", str(out), env=env, timeout=600, prefix=own_network())
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    b = bundle_of(out)
    v = kit("verify", str(b), env=env)
    assert v.returncode == 0 and "workload: " in v.stdout, v.stdout + v.stderr
    return b, yaml.safe_load(path.read_text())


def sent_and_records(b: Path) -> tuple[dict[int, list[dict[str, Any]]], list[dict[str, Any]]]:
    sent = {int(f.stem.split("-")[1]): [json.loads(x) for x in f.read_text().splitlines()]
            for f in b.glob("workload/level-*.jsonl")}
    recs = [json.loads(x) for f in sorted(b.glob("cells/*/level-*/records.jsonl")) for x in f.read_text().splitlines()]
    return sent, recs


def check_counts(b: Path) -> tuple[dict[int, list[dict[str, Any]]], list[dict[str, Any]]]:
    sent, recs = sent_and_records(b)
    assert recs
    for rec in recs:
        item = sent[rec["level"]][rec["workload_index"]]
        assert rec["error"] is None, rec
        assert rec["usage_prompt_tokens"] == rec["prompt_tokens_expected"] == words(item["messages"]), (rec, item)
        assert rec["prompt_flag"] is None and rec["client_tokens"] == item["max_tokens"], rec
    assert "## Workload" in (b / "report.md").read_text()
    return sent, recs


@pytest.mark.parametrize("kind", ["random", "random-ids", "sharegpt", "jsonl", "shared-prefix", "multi-turn"])
def test_each_dataset_kind_end_to_end(kind: str, tmp_path: Path, isolated: dict[str, str]) -> None:
    b, m = run_shipped(ROOT / "experiments" / f"workload-{kind}.yaml", tmp_path / "r", isolated)
    sent, _ = check_counts(b)
    ds = m["load"]["dataset"]
    items = [it for level in sorted(sent) for it in sent[level]]
    if kind == "random":
        lo_in, lo_out = max(int(ds["input_len"] * ds["range_ratio"]), 1), max(1, int(ds["output_len"] * ds["range_ratio"]))
        assert all(lo_in <= words(it["messages"]) <= ds["input_len"] for it in items)
        assert all(lo_out <= it["max_tokens"] <= ds["output_len"] for it in items)
        assert len({words(it["messages"]) for it in items}) > 5  # lengths vary
    elif kind == "random-ids":  # sglang's ids: a run (offset + i + j) mod vocab_size, the words t<id>
        for level_items in sent.values():
            for it in level_items:
                ids = [int(w[1:]) for w in it["messages"][0]["content"].split()]
                assert all(b == (a + 1) % ds["vocab_size"] for a, b in itertools.pairwise(ids)), ids
                assert max(int(ds["input_len"] * ds["range_ratio"]), 1) <= len(ids) <= ds["input_len"]
    elif kind == "sharegpt":
        data = json.loads((ROOT / ds["file"]["path"]).read_text())
        firsts = {c["conversations"][0]["value"]: c["conversations"][1]["value"] for c in data
                  if len(c["conversations"]) >= 2}
        for it in items:
            (msg,) = it["messages"]
            assert msg["content"] in firsts and it["max_tokens"] == len(firsts[msg["content"]].split())
            assert words(it["messages"]) + it["max_tokens"] <= ds["context_len"]
    elif kind == "jsonl":
        lines = [json.loads(x) for x in (ROOT / ds["file"]["path"]).read_text().splitlines()]
        for level_items in sent.values():
            for it in level_items:
                src = lines[it["i"] % len(lines)]
                want = src.get("messages") or [{"role": "user", "content": src["prompt"]}]
                assert it["messages"] == want
                assert it["max_tokens"] == src.get("output_tokens", m["load"]["output_tokens"])
    elif kind == "shared-prefix":
        for level_items in sent.values():  # each level draws its own groups (its seed is load.seed + level)
            systems: dict[str, set[str]] = {}
            for it in level_items:
                system, question = it["messages"][0]["content"].split("\n\n")
                assert len(system.split()) == ds["system_prompt_len"] and len(question.split()) == ds["question_len"]
                systems.setdefault(it["group"], set()).add(system)
            assert all(len(s) == 1 for s in systems.values()) and len(systems) == ds["groups"]
    else:  # multi-turn: turn t of a session is turn t-1's messages plus one exchange
        for level_items in sent.values():
            for prev, it in itertools.pairwise(level_items):
                if prev["group"] == it["group"]:
                    assert it["messages"][:len(prev["messages"])] == prev["messages"]
                    assert len(it["messages"]) == len(prev["messages"]) + 2


def test_the_demo_on_real_text(tmp_path: Path, isolated: dict[str, str]) -> None:
    """experiments/demo-text.yaml as shipped is checked (its signature); a cut of it (2 repeats, levels 1 and 16,
    fewer requests) runs: every prompt is exactly 32 words of the corpus."""
    shipped = ROOT / "experiments" / "demo-text.yaml"
    assert kit("verify", "--trust", TRUST, str(shipped), env=isolated).returncode == 0
    data = yaml.safe_load(shipped.read_text())
    # CI time: 2 repeats, two levels of few requests (c=64 is the shipped demo's; demo.yaml's own test runs it)
    data["design"]["repeats"] = 2
    data["load"]["levels"], data["load"]["requests_per_level"] = [1, 16], [8, 32]
    cut = tmp_path / "demo-text.yaml"
    cut.write_text(yaml.safe_dump(data, sort_keys=False))
    assert kit("sign", str(cut), "--key", str(ROOT / "keys" / "example_ed25519")).returncode == 0
    b, m = run_shipped(cut, tmp_path / "r", isolated)
    sent, recs = check_counts(b)
    assert all(it["content_tokens"] == m["load"]["prompt_tokens"] == words(it["messages"])
               for items in sent.values() for it in items)
    summary = read_json(b / "summary.json")
    experts = {(a["arm"], a["level"]): a["server"]["unique_experts_per_step"] for a in summary["arm_levels"]}
    print("demo on real text, unique experts/step:", experts)
    print("records:", len(recs))
