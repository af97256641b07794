"""kit_hf's token counters (``kit_hf:generation_tokens_total``, ``kit_hf:prompt_tokens_total``, read from
transformers' continuous-batching scheduler and manager) on a real ``transformers serve`` (CPU, tiny model), driven
by kit's real load driver and sampled by kit's real level sampler, checked against what the driver recorded:

- over the level (warm-up included) the generation counter grew by exactly the completion tokens of every request
  as ``transformers serve``'s own usage counted them, and the prompt counter by exactly their usage.prompt_tokens;
- the sampler's series of the counter never goes back, and the server-side generation rate per level
  (kit.stats.telemetry's ``server_tok_s``) matches the rate of content chunks the client received between the same
  two samples (the client sees each token a little after the server made it: a few tokens per stream of slack)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from test_hf_serve import server

from kit.load import LevelSpec, run_level
from kit.stats.telemetry import level_telemetry
from kit.telemetry import LevelSampler, scrape_all

pytest.importorskip("transformers", reason="transformers is not installed (make test installs it)")

pytestmark = pytest.mark.slow
USERS, REQUESTS, WARMUP, TOKENS = 4, 32, 2, 40
GEN, PROMPT = "kit_hf:generation_tokens_total", "kit_hf:prompt_tokens_total"


def test_generated_tokens_counted_by_the_server_match_the_records(tiny_model: Path, tmp_path: Path) -> None:
    level = tmp_path / "level"
    with server(tiny_model, tmp_path / "serve.log") as port:
        url = f"http://127.0.0.1:{port}"
        before, _ = scrape_all(url + "/metrics")
        assert before is not None and before[GEN] == 0 and before[PROMPT] == 0
        spec = LevelSpec(base_url=url, endpoint="chat", model="tiny", concurrency=USERS, requests=REQUESTS,
                         warmup_requests=WARMUP, prompt_tokens=12, output_tokens=TOKENS, seed=5,
                         request_timeout_s=300, processes=1, dialect="transformers", tags={"level": USERS})
        level.mkdir()
        with (level / "telemetry.jsonl").open("w") as series, \
                LevelSampler(url + "/metrics", [], lambda s: series.write(s.model_dump_json() + "\n")) as sampler:
            res = run_level(spec, level)
        started = sampler.stop().started_unix
        after, _ = scrape_all(url + "/metrics")
    assert after is not None and res.ok == REQUESTS and res.errors == 0
    recs = [json.loads(x) for x in (level / "records.jsonl").read_text().splitlines()]
    assert all(r["usage_completion_tokens"] == r["client_tokens"] == TOKENS for r in recs)
    # the warm-up requests are not recorded; they ask the same fixed length (eos off) and prompt shape
    generated = after[GEN] - before[GEN]
    assert generated == (REQUESTS + WARMUP) * TOKENS, (generated, after)
    prompts = sorted(r["usage_prompt_tokens"] for r in recs)
    assert prompts[0] <= (after[PROMPT] - before[PROMPT] - sum(prompts)) / WARMUP <= prompts[-1], after

    samples = [json.loads(x) for x in (level / "telemetry.jsonl").read_text().splitlines()]
    gen = [(s["t_s"], s["server"]["generated_tokens"]) for s in samples if (s.get("server") or {}).get(
        "generated_tokens") is not None]
    assert len(gen) >= 2 and all(b[1] >= a[1] for a, b in itertools.pairwise(gen)), gen
    tele = level_telemetry(level, USERS)
    assert tele is not None and tele.server_tok_s is not None and tele.server_tok_s > 0
    # the rate between two samples of the recorded phase (the warm-up's tokens, sent first, are not recorded)
    first_send = min(r["wall_start"] for r in recs)
    during = [(t, g) for t, g in gen if started + t >= first_send]  # the sampler's clock: started_unix + t_s
    assert len(during) >= 2, (gen, first_send - started)
    (t0, g0), (t1, g1) = during[0], during[-1]
    lo, hi = started + t0, started + t1
    chunks = sum(lo <= r["wall_start"] + c / 1e9 <= hi for r in recs for c in r["chunk_ns"])
    print(f"server {g1 - g0:.0f} tokens in {t1 - t0:.2f} s ({tele.server_tok_s} tok/s); client {chunks} chunks")
    assert abs((g1 - g0) - chunks) <= 0.1 * chunks + 3 * USERS, (g1 - g0, chunks)
