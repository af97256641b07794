"""The node limit stops the parse where it is passed, not after the whole document is composed (review: a file
``l: [a:, a:, ...]`` just under 1 MiB took 20.8 s of CPU and 647 MB before "more than 100000 values")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kit import safeyaml
from kit.errors import ManifestError
from kit.manifest import load_manifest


def _flow_entries(n: int, *, closed: bool = True) -> bytes:
    """The review's shape: a flow list of n one-key mappings ``a:`` (three nodes each: mapping, key, null)."""
    return b"l: [" + b",".join([b"a:"] * n) + (b"]\n" if closed else b"\n")


def test_a_document_of_exactly_the_limit_loads_and_one_node_more_is_refused() -> None:
    # nodes: the top mapping, its key, the list and its items
    fits = b"l: [" + b",".join([b"1"] * (safeyaml.MAX_NODES - 3)) + b"]\n"
    assert len(safeyaml.load(fits).data["l"]) == safeyaml.MAX_NODES - 3
    with pytest.raises(safeyaml.YamlError, match=f"more than {safeyaml.MAX_NODES} nodes") as e:
        safeyaml.load(b"l: [" + b",".join([b"1"] * (safeyaml.MAX_NODES - 2)) + b"]\n")
    assert e.value.line == 1


def test_the_parse_stops_at_the_limit_and_never_reads_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file at the size limit holding some fifty times the limit's nodes: the error is the node limit, reached
    after about MAX_NODES events, never the syntax error at the file's end that a whole parse would reach first."""
    raw = _flow_entries((safeyaml.MAX_BYTES - 16) // 3, closed=False)  # no closing bracket: invalid at its very end
    assert len(raw) <= safeyaml.MAX_BYTES
    events = 0
    get_event = safeyaml._Loader.get_event

    def counting(self: Any) -> Any:
        nonlocal events
        events += 1
        return get_event(self)

    monkeypatch.setattr(safeyaml._Loader, "get_event", counting)
    with pytest.raises(safeyaml.YamlError, match=r"more than \d+ nodes"):
        safeyaml.load(raw)
    assert events <= 2 * safeyaml.MAX_NODES  # a start and an end event per node at most
    with pytest.raises(yaml.YAMLError):  # the syntax error is real: a parse that went on would have ended there
        yaml.safe_load(_flow_entries(3, closed=False))


def test_the_manifest_loader_names_the_line_and_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "wide.yaml"
    path.write_bytes(b"name: wide\n" + _flow_entries(safeyaml.MAX_NODES))
    with pytest.raises(ManifestError, match=rf"line 2: document has more than {safeyaml.MAX_NODES} nodes"):
        load_manifest(path)


@pytest.mark.parametrize("raw, words", [
    (b"a: &x 1\nb: *x\n", "anchor &x"),
    (b"a: 1\na: 2\n", "duplicate key 'a'"),
    (b"a: " + b"[" * 40 + b"]" * 40 + b"\n", "nested deeper"),
    (b"a: .nan\n", "not a finite number"),
    (b"a: 2026-12-07\n", "unquoted date/time"),
    (b"a: !!python/object:os.system x\n", "not allowed"),
])
def test_the_other_refusals_still_hold(raw: bytes, words: str) -> None:
    with pytest.raises(safeyaml.YamlError, match=words):
        safeyaml.load(raw)
