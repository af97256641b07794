"""Review 2: hostile dataset files must end in a clear ManifestError (exit 3), never a traceback; bounds as the docs
state them. Each file is pinned by its real sha256, as a signed manifest would pin it."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from kit.errors import KitError
from kit.manifest.load import Load
from kit.workload import Workload, encode_lines


def _workload(tmp_path: Path, name: str, kind: str, data: bytes) -> Workload:
    p = tmp_path / name
    p.write_bytes(data)
    ds = {"kind": kind, "file": {"path": str(p), "sha256": hashlib.sha256(data).hexdigest()}}
    return Workload(Load.model_validate({"levels": [1], "tokenizer": "words", "dataset": ds}), None)


@pytest.mark.xfail(strict=True, raises=RecursionError, reason="review2: json.loads of deep nesting raises "
                   "RecursionError, which kit.workload.sources._records does not catch (a traceback, not exit 3)")
@pytest.mark.parametrize(("name", "kind", "data"), [
    ("deep.json", "sharegpt", b"[" * 200_000 + b"]" * 200_000),
    ("deep.jsonl", "jsonl", b'{"prompt": "x", "a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}\n"),
])
def test_deeply_nested_json_is_a_manifest_error(tmp_path: Path, name: str, kind: str, data: bytes) -> None:
    with pytest.raises(KitError):
        _workload(tmp_path, name, kind, data).level(4, 1)


@pytest.mark.xfail(strict=True, raises=UnicodeEncodeError, reason="review2: a JSON escape of a lone surrogate "
                   "(\\ud800) is accepted and breaks writing workload/level-<c>.jsonl (UnicodeEncodeError)")
def test_a_lone_surrogate_is_refused_or_written(tmp_path: Path) -> None:
    wl = _workload(tmp_path, "ls.jsonl", "jsonl", b'{"prompt": "\\ud800 x"}\n')
    try:
        items = wl.level(4, 1)
    except KitError:
        return
    encode_lines(items)


@pytest.mark.slow  # writes and hashes 65 MiB
@pytest.mark.xfail(strict=True, reason="review2: docs/workload.md says a data file is bounded at 4 GiB, but "
                   "decode_text refuses anything over 64 MiB: the standard ShareGPT_V3 file (~670 MB) cannot be used")
def test_a_sharegpt_file_over_64_mib_is_read(tmp_path: Path) -> None:
    conv = json.dumps({"conversations": [{"from": "human", "value": "hello there " * 400},
                                         {"from": "gpt", "value": "general kenobi " * 400}]})
    data = ("[" + ",".join([conv] * ((65 << 20) // len(conv) + 1)) + "]").encode()
    assert len(data) > 64 << 20
    assert len(_workload(tmp_path, "sg.json", "sharegpt", data).level(2, 1)) == 2
