"""The `random-ids` dataset against sglang bench_serving's ``sample_random_requests(random_sample=False)``, as its
source writes it (python/sglang/benchmark/datasets/random.py): lengths from np.random's legacy generator, then
``offsets = np.random.randint(0, vocab_size, n)`` and request i's ids ``(offsets[i] + i + j) % vocab_size``.
kit sends them token-exact: with 'words' each id is one word; with a Hugging Face tokenizer the decoded ids are cut
to exactly input_len tokens, counted here by the Rust `tokenizers` library itself."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from kit.errors import ManifestError
from kit.manifest.load import Load
from kit.workload import Workload


def sglang_random_ids(input_len: int, output_len: int, n: int, ratio: float, vocab: int,
                      seed: int) -> tuple[list[list[int]], list[int]]:
    np.random.seed(seed)
    input_lens = np.random.randint(max(int(input_len * ratio), 1), input_len + 1, size=n)
    output_lens = np.random.randint(int(output_len * ratio), output_len + 1, size=n)
    offsets = np.random.randint(0, vocab, size=n)
    ids = [[int((offsets[i] + i + j) % vocab) for j in range(input_lens[i])] for i in range(n)]
    return ids, [int(x) for x in output_lens]


def load(tokenizer: str, **dataset: object) -> Load:
    return Load.model_validate({"levels": [1], "output_tokens": 5, "seed": 3, "tokenizer": tokenizer,
                                "dataset": {"kind": "random-ids", **dataset}})


def test_words_are_sglangs_ids() -> None:
    items = Workload(load("words", input_len=40, output_len=12, range_ratio=0.5, vocab_size=256), None).level(30, 8)
    ref, out = sglang_random_ids(40, 12, 30, 0.5, 256, 8)
    for it, ids, o in zip(items, ref, out, strict=True):
        assert it.messages is not None
        assert it.messages[0].content.split() == [f"t{k}" for k in ids]
        assert it.prompt_tokens == it.content_tokens == len(ids) and it.max_tokens == max(1, o)


def test_words_needs_a_vocabulary_size() -> None:
    with pytest.raises(ManifestError, match="vocab_size"):
        Workload(load("words", input_len=8, output_len=4), None).level(2, 0)


@pytest.mark.slow  # transformers' import
def test_a_tokenizer_gets_exact_lengths_of_mostly_sglangs_ids(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "images" / "transformers"))
    from kit_hf.make_model import save_tokenizer  # type: ignore[import-not-found]
    from tokenizers import Tokenizer

    save_tokenizer(tmp_path, 2048)
    raw = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    vocab = raw.get_vocab_size(with_added_tokens=False)
    items = Workload(load(str(tmp_path), input_len=64, output_len=8, range_ratio=0.5), None).level(40, 2)
    ref, _ = sglang_random_ids(64, 8, 40, 0.5, vocab, 2)
    same = total = 0
    for it, ids in zip(items, ref, strict=True):
        assert it.messages is not None
        got = raw.encode(it.messages[0].content, add_special_tokens=False).ids
        assert len(got) == len(ids) == it.content_tokens
        same += len(set(got) & set(ids))
        total += len(ids)
    print(f"{same}/{total} of sglang's ids kept after the exact cut (vocab {vocab})")
    assert same >= 0.45 * total  # random tokens still: half the ids survive the decode and re-encode (974 of 1928)
