"""kit's one JSON parse (kit.plumbing.jsontypes): what Python's parser accepts but no UTF-8 file can hold (a lone
surrogate) is mended to U+FFFD, a pair stays one character, and nesting past the parser is a ValueError. A server
that sent ``"\\ud800"`` in /server_info or an error event crashed kit at the next write (a review, 2026-12-06)."""

from __future__ import annotations

import json

import pytest

from kit.bundle.names import json_bytes, json_line
from kit.plumbing.jsontypes import TooDeep, loads, loads_at, utf8


@pytest.mark.parametrize("data", [
    '{"v": "\\ud800evil", "\\udc00k": ["x\\uDBFF", {"y": "\\udfff"}]}',  # escapes, any case, keys and lists too
    b'{"v": "\xed\xa0\x80evil", "\xed\xb0\x80k": ["x\xed\xaf\xbf", {"y": "\xed\xbf\xbf"}]}',  # a surrogate's bytes
])
def test_a_lone_surrogate_reads_as_the_replacement_character(data: str | bytes) -> None:
    got = loads(data)
    assert got == {"v": "\ufffdevil", "\ufffdk": ["x\ufffd", {"y": "\ufffd"}]}
    assert json.loads(json_bytes(got).decode("utf-8")) == got and json_line(got).decode("utf-8")


def test_a_pair_and_plain_text_are_untouched_and_the_value_is_the_parsers() -> None:
    text = '{"emoji": "\\ud83d\\ude00", "e": "\\u00e9", "raw": "é😀", "n": [1, 2.5, null, true]}'
    assert loads(text) == json.loads(text) == {"emoji": "😀", "e": "é", "raw": "é😀", "n": [1, 2.5, None, True]}
    assert loads_at('x: {"a": "\\ud800"} and more', 3) == {"a": "\ufffd"}


def test_too_deep_is_a_json_error_and_a_surrogate_from_elsewhere_is_still_written() -> None:
    with pytest.raises(TooDeep) as e:
        loads("[" * 100_000 + "]" * 100_000)
    assert isinstance(e.value, json.JSONDecodeError)
    argv = b"/data/\xff.yaml".decode("utf-8", "surrogateescape")  # a path of odd bytes, as sys.argv holds it
    assert utf8(argv) == "/data/\ufffd.yaml".encode() and json_bytes({"argv": [argv]}).decode("utf-8")
