"""The engine's copy of sglang's expert-distribution recorder, read by kit's expert pass (``record``), against two
things kit did not write: ``torch.load`` of the same dump, and the engine's own /metrics trace of distinct experts
per layer per decode step (``kit_engine_unique_experts``: counted from the weights the MoE block used, not from the
recorder's routed ids). Baseline vs OEA in the direction OEA predicts: fewer distinct experts per decode step."""

from __future__ import annotations

import types
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from engine_helpers import SMALL, EngineProcess

from kit.experiment.expert_pass import record
from kit.files.expert_pass import ExpertPassFile
from kit.manifest.expert_pass import ExpertPass

pytestmark = pytest.mark.slow
torch = pytest.importorskip("torch")

PASS = ExpertPass(top_k=4, requests=12, concurrency=6, prompt_tokens=24, output_tokens=12, seed=5)
MANIFEST = types.SimpleNamespace(load=types.SimpleNamespace(endpoint="chat"),
                                 model=types.SimpleNamespace(served_name="kit-moe"))


def _unique(engine: EngineProcess) -> np.ndarray:
    m = engine.metrics()
    return np.array([[m[f'kit_engine_unique_experts_sum{{layer="{i}"}}'],
                      m[f'kit_engine_unique_experts_count{{layer="{i}"}}']] for i in range(2)])


def _run(start: Callable[[list[str]], EngineProcess], dump: Path, extra: list[str]) -> ExpertPassFile:
    engine = start([*SMALL, "--expert-distribution-recorder-mode", "per_pass", *extra])
    before = _unique(engine)
    out = ExpertPassFile(arm="x", status="failed", requests=PASS.requests, concurrency=PASS.concurrency,
                         prompt_tokens=PASS.prompt_tokens, output_tokens=PASS.output_tokens, top_k=4, seed=5,
                         server_args=[])
    record(PASS, MANIFEST, engine.url, dump, out)  # type: ignore[arg-type]
    delta = _unique(engine) - before
    assert out.answered == PASS.requests and out.dump_file is not None
    # the engine's own trace: the same decode steps, the same distinct experts per layer
    assert out.decode_passes == delta[0, 1] == delta[1, 1]
    assert [x.mean for x in out.layers] == [round(s / n, 4) for s, n in delta]
    # torch's reader of the same dump: every decode pass's distinct experts per layer
    loaded = torch.load(dump / out.dump_file, weights_only=True)
    decode = [r for r in loaded["records"] if int(r["global_physical_count"].sum(dim=1).max()) // 4 <= 6]
    assert [(r["forward_pass_id"], torch.count_nonzero(r["global_physical_count"], dim=1).tolist())
            for r in decode] == [(p.forward_pass_id, p.distinct) for p in out.raw]
    assert out.prefill_passes == len(loaded["records"]) - len(decode) > 0
    return out


def test_recorder_counts_distinct_experts_and_oea_uses_fewer(start_engine: Callable[[list[str]], EngineProcess],
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", str(tmp_path / "base"))
    base = _run(start_engine, tmp_path / "base", [])
    monkeypatch.setenv("SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR", str(tmp_path / "oea"))
    oea = _run(start_engine, tmp_path / "oea", ["--oea-k0", "2"])
    assert oea.mean_distinct is not None and base.mean_distinct is not None
    assert oea.mean_distinct < base.mean_distinct
    for b in oea.by_batch:  # at batch 1 OEA is exactly top-k0; above it, fewer experts than plain top-k
        same = [x for x in base.by_batch if x.batch == b.batch]
        assert b.mean == 2.0 if b.batch == 1 else (not same or b.mean < same[0].mean), (b, same)


def test_without_the_flag_the_endpoints_refuse_as_sglang_does(start_engine: Callable[[list[str]], EngineProcess]
                                                              ) -> None:
    engine = start_engine(SMALL)
    status, _, body = engine.request("POST", "/start_expert_distribution_record")
    assert status == 500 and b"--expert-distribution-recorder-mode" in body
