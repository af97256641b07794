"""Hostile dataset files end in a clear ManifestError (exit 3), never a traceback, and before any server starts
(``kit.workload.check_dataset``, called by kit run's preflight); bounds as docs/workload.md states them. Each file is
pinned by its real sha256, as a signed manifest would pin it. Review 2 found deep nesting a RecursionError (kit run:
exit 1 "internal error" after a server had started) and a lone-surrogate escape a UnicodeEncodeError when written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kit.errors import ManifestError
from kit.manifest.load import Load
from kit.workload import Workload, check_dataset, encode_lines
from kit.workload.corpus import MAX_TEXT_BYTES, Cutter, read_pinned
from kit.workload.tokens import WordCounter


def _workload(tmp_path: Path, name: str, kind: str, data: bytes) -> Workload:
    p = tmp_path / name
    p.write_bytes(data)
    ds = {"kind": kind, "file": {"path": str(p), "sha256": hashlib.sha256(data).hexdigest()}}
    return Workload(Load.model_validate({"levels": [1], "tokenizer": "words", "dataset": ds}), None)


@pytest.mark.parametrize(("name", "kind", "data"), [
    ("deep.json", "sharegpt", b"[" * 200_000 + b"]" * 200_000),
    ("deep.jsonl", "jsonl", b'{"prompt": "x", "a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"),
])
def test_deeply_nested_json_is_a_manifest_error(tmp_path: Path, name: str, kind: str, data: bytes) -> None:
    wl = _workload(tmp_path, name, kind, data)
    with pytest.raises(ManifestError, match="nested deeper than the JSON parser allows") as e:
        check_dataset(wl.load, None)
    assert name in str(e.value) and e.value.exit_code == 3
    if kind == "jsonl":
        assert "line 1 is nested" in str(e.value)


def test_a_lone_surrogate_is_refused_or_written(tmp_path: Path) -> None:
    wl = _workload(tmp_path, "ls.jsonl", "jsonl", b'{"prompt": "ok"}\n{"prompt": "\\ud800 x"}\n')
    with pytest.raises(ManifestError, match=r"item 2: a string is not valid Unicode .*surrogate"):
        check_dataset(wl.load, None)
    # a surrogate *pair* is one character, and is written
    good = _workload(tmp_path, "pair.jsonl", "jsonl", b'{"prompt": "\\ud83d\\ude80 x"}\n')
    assert "\U0001f680 x".encode() in encode_lines(good.level(2, 1))


def test_a_sharegpt_conversation_with_a_lone_surrogate_is_skipped(tmp_path: Path) -> None:
    recs = [{"conversations": [{"from": "human", "value": "bad \ud800 one two"}, {"from": "gpt", "value": "a b c"}]},
            {"conversations": [{"from": "human", "value": "good one two"}, {"from": "gpt", "value": "d e f"}]}]
    wl = _workload(tmp_path, "sg.json", "sharegpt", json.dumps(recs).encode())
    items = wl.level(3, 1)
    assert {m.content for it in items for m in it.messages or []} == {"good one two"}
    encode_lines(items)


def test_the_size_is_checked_before_reading_and_the_hash_streams(tmp_path: Path) -> None:
    p = tmp_path / "big.txt"
    with open(p, "wb") as f:  # sparse: 2 GiB without writing them
        f.truncate(2 << 30)
    with pytest.raises(ManifestError, match=r"is 2147483648 bytes, over kit's 1024 MiB bound"):
        read_pinned(p, "0" * 64, "load.dataset.file big.txt")
    data = b"word " * 300_000  # 1.5 MB: hashed across chunks
    p.write_bytes(data)
    assert read_pinned(p, hashlib.sha256(data).hexdigest(), "x") == data
    with pytest.raises(ManifestError, match="has sha256"):
        read_pinned(p, "0" * 64, "x")
    # a text kind (tokenized whole) keeps its 64 MiB bound, with the number in the error
    with pytest.raises(ManifestError, match=r"over kit's 1 MiB bound"):
        read_pinned(p, hashlib.sha256(data).hexdigest(), "x", limit=1 << 20)
    assert MAX_TEXT_BYTES == 64 << 20


@pytest.mark.slow  # writes and hashes 65 MiB
def test_a_sharegpt_file_over_64_mib_is_read(tmp_path: Path) -> None:
    conv = json.dumps({"conversations": [{"from": "human", "value": "hello there " * 400},
                                         {"from": "gpt", "value": "general kenobi " * 400}]})
    data = ("[" + ",".join([conv] * ((65 << 20) // len(conv) + 1)) + "]").encode()
    assert len(data) > 64 << 20
    assert len(_workload(tmp_path, "sg.json", "sharegpt", data).level(2, 1)) == 2


def test_a_length_the_tokenizer_cannot_cut_is_refused_not_sent_inexact() -> None:
    class TwoPerWord(WordCounter):
        """A tokenizer that makes every word two tokens (the word and a boundary mark): an odd count is impossible."""

        def encode(self, text: str) -> list[int]:
            return [x for i in super().encode(text) for x in (2 * i, 2 * i + 1)]

        def decode(self, ids: list[int]) -> str:
            return super().decode([x // 2 for j, x in enumerate(ids) if j == 0 or ids[j - 1] // 2 != x // 2])

    text = " ".join(f"w{i}" for i in range(500))
    cut = Cutter(TwoPerWord(), text, 1)
    assert cut.cut(4, cut.start(0))[1] == 4
    with pytest.raises(ManifestError, match=r"no cut of the text re-encodes to exactly 3 tokens .*closest counts"):
        cut.cut(3, cut.start(0))
