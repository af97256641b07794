"""`kit run experiments/transformers-cpu.yaml` end to end against real `transformers serve` processes:
the signed shipped manifest (baseline vs OEA), and an A/A copy of it (the same arm twice).
In the A/A run kit's telemetry reads kit_hf's /metrics during each level: the running batch reaches the
concurrency and the report shows it per level.

Every recorded request's token count, counted by kit's client one content event at a time, must equal the
count in the server's own usage; the bundle must verify; the A/A run must find no significant difference."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hf_helpers import IMAGE_DIR, MANIFEST, OEA_DIR, ROOT
from support.ports import free_port
from support.scrapes import assert_scrapes_answered

pytest.importorskip("transformers", reason="transformers is not installed (make test installs it)")

pytestmark = pytest.mark.slow


def kit(*args: str, prefix: list[str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*(prefix or []), sys.executable, "-m", "kit", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=timeout, check=False, env=dict(os.environ))


def own_network() -> list[str]:
    """A network namespace of its own (the shipped manifest's port is fixed), or [] where not allowed."""
    for unshare in (["unshare", "--net", "--"], ["unshare", "--user", "--map-root-user", "--net", "--"]):
        prefix = [*unshare, "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
        try:
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=30, check=False).returncode == 0:
                return prefix
        except (OSError, subprocess.TimeoutExpired):
            pass
    return []


def bundle(out: Path) -> Path:
    (b,) = [p for p in out.iterdir() if p.is_dir()]
    return b


def records(b: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for f in sorted(b.glob("cells/*/level-*/records.jsonl"))
            for line in f.read_text().splitlines() if line.strip()]


def test_shipped_cpu_manifest_end_to_end(shipped_model: Path, tmp_path: Path, isolated: dict[str, str]) -> None:
    out = tmp_path / "run"
    r = kit("run", "--trust", str(ROOT / "allowed_signers"), str(MANIFEST), "--out", str(out), prefix=own_network())
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    b = bundle(out)
    m = yaml.safe_load(MANIFEST.read_text())
    recs = records(b)
    assert len(recs) == 2 * m["design"]["repeats"] * sum(m["load"]["requests_per_level"])
    for rec in recs:
        assert rec["error"] is None, rec
        # kit's count (content events) against transformers' usage, request by request
        assert rec["client_tokens"] == rec["usage_completion_tokens"] == m["load"]["output_tokens"], rec
    check_prompt_tokens(b, recs, shipped_model, m["load"]["prompt_tokens"])
    assert kit("verify", str(b)).returncode == 0
    # model.digest: the model directory's sha256 tree is in the signed provenance, as the maker computes it
    from kit_hf.make_model import sha256_tree

    envelope = json.loads((b / "provenance.dsse.json").read_text())
    deps = json.loads(base64.b64decode(envelope["payload"]))["predicate"]["buildDefinition"]["resolvedDependencies"]
    (model,) = [d for d in deps if d["uri"] == f"file://{shipped_model}"]
    assert model["digest"] == {"sha256": sha256_tree(shipped_model)[0]}
    summary = json.loads((b / "summary.json").read_text())
    for al in summary["arm_levels"]:  # the figures the report shows (kept in the test log)
        print(al["arm"], al["level"], "tok/s", al["throughput_tok_s"], "TPOT ms", al["tpot_ms"])
    print(r.stdout[-3000:])


def check_prompt_tokens(b: Path, recs: list[dict[str, Any]], model: Path, prompt_tokens: int) -> None:
    """Token-exact prompts (load.dataset text), request by request, against two counts kit did not make: the model's
    tokenizer (transformers' own AutoTokenizer, loaded here) and transformers serve's usage.prompt_tokens."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model), local_files_only=True)
    sent = {}
    for f in b.glob("workload/level-*.jsonl"):
        level = int(f.stem.split("-")[1])
        for line in f.read_text().splitlines():
            item = json.loads(line)
            sent[(level, item["i"])] = item
    for rec in recs:
        item = sent[(rec["level"], rec["workload_index"])]
        (msg,) = item["messages"]
        assert len(tok.encode(msg["content"], add_special_tokens=False)) == prompt_tokens, item
        templated = tok.apply_chat_template(item["messages"], add_generation_prompt=True, tokenize=True)["input_ids"]
        assert rec["prompt_tokens_expected"] == len(templated), (rec, item)
        assert abs(rec["usage_prompt_tokens"] - len(templated)) <= 1, (rec, item)
        assert rec["prompt_flag"] is None, rec
    print("prompt tokens: content", prompt_tokens, "templated", sorted({r["prompt_tokens_expected"] for r in recs}),
          "server", sorted({r["usage_prompt_tokens"] for r in recs}))


def check_running_batch(b: Path, levels: list[int]) -> None:
    """kit_hf's /metrics seen by kit's level sampler: every level's telemetry read the CB scheduler's running count;
    across the cells the running batch came near each level's concurrency and never exceeded it (closed loop); the
    report shows the running batch per level."""
    summary = json.loads((b / "summary.json").read_text())
    for t in b.glob("cells/*/level-*/telemetry.json"):
        tel = json.loads(t.read_text())
        assert tel["sources"].get("running") == "kit_hf:num_requests_running", tel
        assert_scrapes_answered(tel)  # torch holds both cores of a 2-core machine under the parallel suite
    for c in levels:
        seen = [cell["levels"][str(c)]["telemetry"] for cell in summary["cells"]]
        peaks = [s["running_max"] for s in seen if s["samples"]]
        print(f"c={c}: running max per cell {peaks}")
        # never above the concurrency (a closed loop); reaching it exactly depends on a scrape (about once a second)
        # landing while every stream runs: a clean clone under the parallel suite saw 15 of 16 at its best
        assert peaks and c // 2 < max(peaks) <= c and all(p <= c for p in peaks), (c, seen)
    report = (b / "report.md").read_text()
    for c in levels:
        assert f"What the server ran at c={c}" in report


def test_aa_copy_finds_no_difference(shipped_model: Path, tmp_path: Path, isolated: dict[str, str]) -> None:
    m = yaml.safe_load(MANIFEST.read_text())
    m["name"] = "transformers-cpu-aa"
    m["arms"] = [{"name": "a1", "description": "baseline"}, {"name": "a2", "description": "baseline again"}]
    m["server"]["port"] = free_port()
    m["load"]["levels"], m["load"]["requests_per_level"] = [1, 16], [8, 32]  # CI time: two levels are enough
    # judged at 99.9 %: with two cells an arm, a loaded machine's busier moment during one arm's cells was "a2
    # slower: +103 % [+49.9, +175.3]" at 95 % (here, under a parallel suite and a profiler); a bias kit put between
    # two identical arms (port, order, warm-up) is the same in every cell and still shows at 99.9 %. The 5 % false-
    # alarm rate itself is measured on simulated bundles (tests/stats), not asked of one real run.
    m["analysis"]["confidence"] = 0.999
    # this checkout's kit_hf (its /metrics), not whichever one is installed: a process-runtime server inherits
    # no PYTHONPATH from kit (kit.runtime.base_environment)
    m["server"]["env"]["PYTHONPATH"] = os.pathsep.join([str(IMAGE_DIR), str(OEA_DIR)])
    path = tmp_path / "aa.yaml"
    path.write_text(yaml.safe_dump(m, sort_keys=False))
    out = tmp_path / "aa"
    r = kit("run", str(path), "--out", str(out), "--allow-unsigned")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    b = bundle(out)
    assert all(rec["client_tokens"] == rec["usage_completion_tokens"] for rec in records(b))
    check_running_batch(b, m["load"]["levels"])
    summary = json.loads((b / "summary.json").read_text())
    primary = [c for c in summary["comparisons"] if c["tested"] and c["metric"] == m["analysis"]["primary"]]
    assert len(primary) == len(m["load"]["levels"])
    for c in primary:
        assert not c["significant"], c["verdict"]
    print(r.stdout[-3000:])
