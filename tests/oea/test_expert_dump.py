"""kit's torch-free reader of sglang's per_pass dump, against real torch: a dump written by ``torch.save`` in the
structure of sglang 0.5.23's ``_DetailAccumulator.dump`` (records of int32 ``global_physical_count`` [layers,
physical experts], ``last_physical_to_logical_map``), with EPLB-style replicas, a dense layer that never routes,
prefill passes and a non-contiguous tensor; the distinct-expert counts are recomputed here with torch's own
scatter_add and count_nonzero."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from kit.experiment import expert_dump
from kit.experiment.expert_dump import DumpError, DumpStats, read_dump

torch = pytest.importorskip("torch")

LAYERS, LOGICAL, REPLICAS, TOP_K, CONC = 4, 16, 4, 4, 8


def _pass(rng: np.random.Generator, tokens: int, p2l: torch.Tensor) -> torch.Tensor:
    """sglang's _SelectExpertsSinglePassGatherer: scatter_add of each token's top-k physical ids per layer."""
    count = torch.zeros((LAYERS, LOGICAL + REPLICAS), dtype=torch.int32)
    for layer in range(1, LAYERS):  # layer 0 is dense: never routed
        for _ in range(tokens):
            ids = torch.from_numpy(rng.choice(LOGICAL + REPLICAS, size=TOP_K, replace=False))
            count[layer].scatter_add_(0, ids, torch.ones(TOP_K, dtype=torch.int32))
    return count


def _write(path: Path, batches: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
    rng = np.random.default_rng(1)
    p2l = torch.cat([torch.arange(LOGICAL), torch.tensor([0, 3, 3, 7])]).repeat(LAYERS, 1)  # replicas of 0, 3, 7
    counts = [_pass(rng, b, p2l) for b in batches]
    counts[1] = torch.stack([counts[1], counts[1] * 7], dim=2)[:, :, 0]  # a strided view: storage twice its size
    assert not counts[1].is_contiguous()
    records = [{"forward_pass_id": i + 10, "rank": 0, "gatherer_key": "primary", "global_physical_count": c}
               for i, c in enumerate(counts)]
    torch.save({"records": records, "last_physical_to_logical_map": p2l.to(torch.int64)}, str(path))
    return counts, p2l


def test_reader_and_counts_match_torch(tmp_path: Path) -> None:
    batches = [40, 3, 8, 8, 1, 12, 5]  # 40 and 12: prefills (more than CONC tokens)
    counts, p2l = _write(tmp_path / "expert_distribution_recorder_1.5_0.pt", batches)
    dump = read_dump(tmp_path / "expert_distribution_recorder_1.5_0.pt")
    loaded = torch.load(tmp_path / "expert_distribution_recorder_1.5_0.pt", weights_only=True)
    for mine, theirs in zip(dump["records"], loaded["records"], strict=True):  # type: ignore[arg-type]
        assert np.array_equal(mine["global_physical_count"], theirs["global_physical_count"].numpy())
        assert mine["forward_pass_id"] == theirs["forward_pass_id"]
    stats = DumpStats(dump, TOP_K, CONC)
    assert stats.passes == 7 and stats.prefill == 2 and stats.moe_layers == [1, 2, 3] and stats.experts == LOGICAL
    expected = []
    for b, c in zip(batches, counts, strict=True):
        if b > CONC:
            continue
        logical = torch.zeros((LAYERS, LOGICAL), dtype=torch.int64).scatter_add_(1, p2l, c.to(torch.int64))
        expected.append((b, torch.count_nonzero(logical[1:], dim=1).tolist()))
    assert [(b, d.tolist()) for _, b, d in stats.decode] == expected
    per_layer = np.array([d for _, d in expected])
    assert [x.mean for x in stats.layers()] == [round(float(v), 4) for v in per_layer.mean(axis=0)]
    assert [x.p90 for x in stats.layers()] == [round(float(v), 4) for v in np.percentile(per_layer, 90, axis=0)]
    assert {b.batch: b.passes for b in stats.by_batch()} == {1: 1, 3: 1, 5: 1, 8: 2}


def test_a_pickle_naming_anything_else_is_refused(tmp_path: Path) -> None:
    evil = tmp_path / "evil.pt"
    with zipfile.ZipFile(evil, "w") as z:
        z.writestr("evil/data.pkl", pickle.dumps({"records": [print]}, protocol=2))
    with pytest.raises(DumpError, match=r"builtin__\.print"):
        read_dump(evil)
    (tmp_path / "junk.pt").write_bytes(b"not a zip")
    with pytest.raises(DumpError, match="unreadable"):
        read_dump(tmp_path / "junk.pt")
    torch.save({"logical_count": torch.zeros(2, 3)}, str(tmp_path / "stat.pt"))  # the stat mode's dump
    with pytest.raises(DumpError, match="per_pass"):
        read_dump(tmp_path / "stat.pt")


@pytest.mark.parametrize("shape", ["repeat", "many-names"])
def test_a_dump_that_multiplies_memory_is_refused(tmp_path: Path, shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A hostile server's dump, written by real torch.save: one int32 expanded (stride 0) to 10^8 elements, or one
    4 MiB storage viewed by 300 records (1.2 GB of tensors from a 4 MiB file): refused before the memory is taken
    (the bound lowered to 16 MiB here, so that the test does not build the 1 GiB first)."""
    monkeypatch.setattr(expert_dump, "MAX_DUMP_BYTES", 16 << 20)
    if shape == "repeat":
        count = torch.zeros(1, dtype=torch.int32).expand(100_000_000)
        records = [{"forward_pass_id": 0, "rank": 0, "gatherer_key": "primary", "global_physical_count": count}]
        why = "more elements than its storage"
    else:
        base = torch.zeros((1, 1 << 20), dtype=torch.int32)  # 300 views of one storage: 300 tensors to build
        records = [{"forward_pass_id": i, "rank": 0, "gatherer_key": "primary", "global_physical_count": base[:]}
                   for i in range(300)]
        why = "more than 16777216 bytes"
    path = tmp_path / "expert_distribution_recorder_0_0.pt"
    torch.save({"records": records, "last_physical_to_logical_map": torch.zeros((1, 1), dtype=torch.int64)}, path)
    with pytest.raises(DumpError, match=why):
        read_dump(path)
