"""Strict YAML loading for signed manifests.

The signature covers the exact bytes, so the loader works on bytes already in memory and never
re-reads a file. It accepts plain data only: mappings with unique string keys, sequences, and the
core scalar types (str, int, float, bool, null). Anchors, aliases, merge keys, custom or Python
tags, timestamps and binary are refused, so nothing can blow up or construct objects. Every value
keeps the line it came from, so validation errors can point at it.

The nesting and node limits are enforced while the document is composed, node by node, so a hostile
file stops at the limit: the pure-Python parser costs some 20 us and a few hundred bytes per node,
and a file at the size limit can hold a million nodes (20 s and 650 MB had they all been composed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 32
MAX_NODES = 20_000  # keys and values together; the shipped manifests have at most about 150
MAX_NUMBER_CHARS = 100  # an integer's digits (with sign, underscores, 0x): int() refuses more than 4300
MAX_QUOTE = 200  # the most characters of an input value a message quotes (``excerpt``)

Path = tuple[str | int, ...]

_SCALAR_TAGS = {
    "tag:yaml.org,2002:str",
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"


def excerpt(value: object, limit: int = MAX_QUOTE, *, count: bool = True) -> str:
    """``repr(value)`` cut to about ``limit`` characters for a message: a long string, list or mapping ends in an
    ellipsis and (``count``) its length, so that one oversized input never makes a message of its own size."""
    text = repr(value)
    if len(text) <= limit:
        return text
    head = text[:limit]
    if isinstance(value, (list, tuple, dict)):
        cut = head.rfind(", ")
        head = (head[:cut] if cut > 0 else head) + ", …" + text[-1]
        n = f"{len(value)} {'entries' if isinstance(value, dict) else 'items'}"
    elif isinstance(value, str):
        head = head + "…" + text[-1]
        n = f"{len(value)} characters"
    else:
        head, n = head + "…", f"{len(text)} characters"
    return f"{head} ({n})" if count else head


def clip(text: str | None, limit: int = MAX_QUOTE) -> str:
    """Unquoted text from the input (an anchor, a tag, a key, names joined) cut as ``excerpt`` cuts a string."""
    text = str(text)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class YamlError(ValueError):
    """The bytes are not acceptable YAML; ``line`` is 1-based when known."""

    def __init__(self, message: str, line: int | None = None, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.hint = hint


START = "a manifest is a YAML mapping: start from experiments/demo.yaml, or see `kit schema`"
TEXT = ("save it as UTF-8 text (an editor's UTF-16 holds NUL bytes: `iconv -f UTF-16 -t UTF-8 FILE > NEW`)")


@dataclass
class Document:
    data: Any
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of ``path``, or of its nearest ancestor that has one."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)


class _Loader(yaml.SafeLoader):
    """A SafeLoader whose composer refuses anchors and aliases outright and stops at the nesting and node limits."""

    depth = 0
    nodes = 0  # nodes composed so far (keys, scalars, sequences, mappings): the parse stops past MAX_NODES

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:  # type: ignore[override]
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        if self.depth >= MAX_DEPTH + 1:  # PyYAML composes recursively: stop before Python's recursion limit
            raise YamlError(f"document is nested deeper than {MAX_DEPTH} levels (the nesting limit)", line)
        self.nodes += 1
        if self.nodes > MAX_NODES:  # before the rest is scanned: time and memory stay bounded by the limit
            raise YamlError(f"document has more than {MAX_NODES} nodes (keys and values together: the limit for a "
                            "manifest)", line)
        self.depth += 1
        try:
            return self._compose(parent, index, event)
        finally:
            self.depth -= 1

    def _compose(self, parent: Node | None, index: Any, event: Any) -> Node | None:
        line = event.start_mark.line + 1 if event.start_mark is not None else None
        if isinstance(event, yaml.AliasEvent):
            raise YamlError(
                f"alias *{clip(event.anchor)} is not allowed (anchors and aliases are refused in manifests)", line
            )
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise YamlError(f"anchor &{clip(anchor)} is not allowed (anchors and aliases are refused in manifests)",
                            line)
        return super().compose_node(parent, index)  # type: ignore[no-any-return]


def load(raw: bytes) -> Document:
    """Parse ``raw`` into plain data plus a map from value paths to line numbers."""
    if len(raw) > MAX_BYTES:
        raise YamlError(f"file is {len(raw)} bytes; manifests are limited to {MAX_BYTES} bytes")
    if not raw.strip():
        raise YamlError("file is empty", hint=START)
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise YamlError(f"file contains a NUL byte at offset {nul}; is it binary?", raw[:nul].count(b"\n") + 1,
                        hint=TEXT)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise YamlError(f"file is not valid UTF-8 (byte offset {e.start}); is it binary?", line, hint=TEXT) from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
    except YamlError:
        raise
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        tab = "\\t" in str(e.problem) or "\t" in str(e.problem)
        raise YamlError(f"not valid YAML: {e.problem or e}", mark.line + 1 if mark is not None else None,
                        hint="indent with spaces: YAML does not allow tabs there" if tab else
                        "fix the line named (an indentation, a missing colon or quote); " + START) from None
    except yaml.YAMLError as e:
        raise YamlError(f"not valid YAML: {e}", hint=START) from None
    except RecursionError:  # defence in depth: the composer's depth limit stops long before this
        raise YamlError(f"document is nested deeper than {MAX_DEPTH} levels (the nesting limit)") from None
    finally:
        loader.dispose()
    if node is None:
        raise YamlError("file holds no YAML document")
    doc = Document(data=None)
    builder = _Builder(loader, doc)
    doc.data = builder.build(node, (), 0)
    return doc


class _Builder:
    def __init__(self, loader: _Loader, doc: Document) -> None:
        self.loader = loader
        self.doc = doc

    def build(self, node: Node, path: Path, depth: int) -> Any:
        line = node.start_mark.line + 1  # the composer has counted every node: at most MAX_NODES come here
        if depth > MAX_DEPTH:
            raise YamlError(f"document is nested deeper than {MAX_DEPTH} levels", line)
        self.doc.lines[path] = line
        if isinstance(node, MappingNode):
            if node.tag != _MAP:
                raise YamlError(f"tag {clip(node.tag)} is not allowed", line)
            return self._mapping(node, path, depth)
        if isinstance(node, SequenceNode):
            if node.tag != _SEQ:
                raise YamlError(f"tag {clip(node.tag)} is not allowed", line)
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        assert isinstance(node, ScalarNode)
        return self._scalar(node, line)

    def _mapping(self, node: MappingNode, path: Path, depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            kline = key_node.start_mark.line + 1
            if not isinstance(key_node, ScalarNode) or key_node.tag != "tag:yaml.org,2002:str":
                if isinstance(key_node, ScalarNode) and key_node.tag == "tag:yaml.org,2002:merge":
                    raise YamlError("merge keys (<<) are not allowed", kline)
                raise YamlError("mapping keys must be plain strings", kline)
            key = str(key_node.value)
            if key in seen:
                where = ".".join(str(p) for p in (*path, key))
                raise YamlError(f"duplicate key {excerpt(where)} (first defined on line {seen[key]})", kline)
            seen[key] = kline
            out[key] = self.build(value_node, (*path, key), depth + 1)
        return out

    def _scalar(self, node: ScalarNode, line: int) -> Any:
        if node.tag not in _SCALAR_TAGS:
            if node.tag == "tag:yaml.org,2002:timestamp":
                raise YamlError(f"unquoted date/time {excerpt(node.value)}: quote it to make it a string", line)
            raise YamlError(f"tag {clip(node.tag)} is not allowed (only plain strings, numbers, booleans, null)", line)
        if node.tag == "tag:yaml.org,2002:int" and len(node.value) > MAX_NUMBER_CHARS:
            raise YamlError(f"a number of {len(node.value)} characters (at most {MAX_NUMBER_CHARS}): no field takes "
                            "one that long", line)
        value = self.loader.construct_object(node, deep=True)
        if isinstance(value, float) and not math.isfinite(value):
            raise YamlError(f"{excerpt(node.value)} is not a finite number", line)
        return value
