"""The workload: every request a level sends, built before the level starts from ``load.dataset``, counted with the
served model's tokenizer (``kit.workload.tokens``), and written into the bundle as ``workload/level-<c>.jsonl``
(``kit.files.workload``). The load driver sends line i as request i (recorded requests first, then the warm-up's)
and checks each response's ``usage.prompt_tokens`` against the line's ``prompt_tokens``.

The interface is one call per level: ``Workload(load, model_path).level(n, seed)`` gives ``n`` ``WorkItem``s in
index order; whoever schedules the requests (closed loop today, arrival times in kit.load.arrivals) pairs index i
with its send time.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from kit.files.workload import Message, SourceFile, WorkItem, WorkloadIndex
from kit.manifest.load import Load
from kit.manifest.workload import (
    DatasetFile,
    JsonlSet,
    MultiTurnSet,
    RandomIdsSet,
    RandomSet,
    SharedPrefixSet,
    ShareGptSet,
)
from kit.workload import sources
from kit.workload.corpus import (
    CORPUS,
    CORPUS_SHA256,
    MAX_DATA_BYTES,
    MAX_TEXT_BYTES,
    Cutter,
    corpus_text,
    decode_text,
    read_pinned,
)
from kit.workload.tokens import Counter, counter_for, template_overhead

__all__ = ["WorkItem", "Workload", "check_dataset", "encode_lines"]


class Workload:
    """The dataset of one manifest's load section, its texts read (and their sha256 checked) once."""

    def __init__(self, load: Load, model_path: str | None) -> None:
        if load.dataset is None:
            raise ValueError("no load.dataset: the legacy word prompts need no workload")
        self.load, self.ds = load, load.dataset
        self.counter: Counter = counter_for(load.tokenizer, model_path)
        self.sources: list[SourceFile] = []
        self._text: str | None = None
        self._ids: list[int] | None = None  # the text's tokens, encoded once for every level's seed
        self._cutter: dict[int, Cutter] = {}

    def _read(self, f: DatasetFile | None) -> str:
        if self._text is None:
            if f is None:
                self._text = corpus_text()
                self.sources.append(SourceFile(path=f"kit:{CORPUS.name}", sha256=CORPUS_SHA256,
                                               bytes=CORPUS.stat().st_size))
            else:
                limit = MAX_DATA_BYTES if isinstance(self.ds, ShareGptSet | JsonlSet) else MAX_TEXT_BYTES
                data = read_pinned(Path(f.path).expanduser(), f.sha256, f"load.dataset.file {f.path}", limit)
                self._text = decode_text(data, f"load.dataset.file {f.path}", limit)
                self.sources.append(SourceFile(path=f.path, sha256=f.sha256, bytes=len(data)))
        return self._text

    def _cut(self, seed: int) -> Cutter:
        if seed not in self._cutter:
            text = self._read(getattr(self.ds, "file", None))
            self._cutter[seed] = cut = Cutter(self.counter, text, seed, self._ids)
            self._ids = cut.ids
        return self._cutter[seed]

    def contents(self, n: int, seed: int) -> list[sources.Content]:
        ds, load = self.ds, self.load
        if isinstance(ds, ShareGptSet):
            return sources.sharegpt_set(ds, self._read(ds.file), self.counter, n, seed)
        if isinstance(ds, JsonlSet):
            return sources.jsonl_set(ds.file.path, self._read(ds.file), self.counter, n, load.output_tokens)
        if isinstance(ds, RandomIdsSet):  # no text: random token ids
            return sources.random_ids_set(ds, self.counter, n, seed)
        cut = self._cut(seed)
        if isinstance(ds, RandomSet):
            return sources.random_set(ds, cut, n, seed)
        if isinstance(ds, SharedPrefixSet):
            return sources.shared_prefix_set(ds, cut, n, seed)
        if isinstance(ds, MultiTurnSet):
            return sources.multi_turn_set(ds, cut, n)
        return sources.text_set(cut, n, load.prompt_tokens, load.output_tokens)

    def level(self, n: int, seed: int) -> list[WorkItem]:
        """``n`` requests in index order, each with the prompt tokens the server should count."""
        chat = self.load.endpoint == "chat"
        items = []
        for i, c in enumerate(self.contents(n, seed)):
            if chat:
                items.append(WorkItem(i=i, messages=[Message(**m) for m in c.messages], max_tokens=c.max_tokens,
                                      prompt_tokens=self.counter.count_chat(c.messages),
                                      content_tokens=c.content_tokens, group=c.group))
            else:
                prompt = "\n\n".join(m["content"] for m in c.messages)
                items.append(WorkItem(i=i, prompt=prompt, max_tokens=c.max_tokens,
                                      prompt_tokens=self.counter.count_prompt(prompt),
                                      content_tokens=c.content_tokens, group=c.group))
        return items

    def index(self, levels: dict[str, str]) -> WorkloadIndex:
        overhead = template_overhead(self.counter) if self.load.endpoint == "chat" else None
        return WorkloadIndex(dataset=self.ds.kind, tokenizer=self.counter.name, tokenizer_sha256=self.counter.sha256,
                             template_overhead=overhead, sources=list(self.sources), levels=dict(levels))


def check_dataset(load: Load, model_path: str | None) -> Workload | None:
    """Read, hash, parse and check ``load.dataset`` once, before any server starts (``kit run``'s preflight): a
    hostile or broken data file is a ManifestError (exit 3) here, not an error after a server came up. Every record
    of a sharegpt or jsonl file is checked; text kinds are tokenized whole. The Workload that did it is returned,
    its text read and tokenized: the run builds every level's requests from it, and reads the file no more. None
    without ``load.dataset``."""
    if load.dataset is None:
        return None
    workload = Workload(load, model_path)
    encode_lines(workload.level(1, load.seed))
    return workload


def encode_lines(items: list[WorkItem]) -> bytes:
    """``workload/level-<c>.jsonl``'s bytes (one item a line, nulls left out)."""
    return b"".join(json.dumps(it.model_dump(mode="json", exclude_none=True), ensure_ascii=False,
                               separators=(",", ":")).encode() + b"\n" for it in items)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
