"""Real text and token-exact cuts of it.

The shipped corpus is *The Devil's Dictionary* (public domain; kit/workload/data/README.md says where the file came
from). ``Cutter`` tokenizes a text once and hands out windows of exactly ``n`` tokens: it decodes a window of the
token stream and re-encodes the text, widening or narrowing the window until the text itself counts ``n`` (a BPE
window cut mid-word can re-encode to another count). The window's start moves with the request index, so no two
requests of a level share a cached prefix unless the dataset wants them to.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import random
from pathlib import Path

from kit.errors import ManifestError
from kit.manifest import workload as bounds
from kit.plumbing.files import open_regular
from kit.workload.tokens import Counter

CORPUS = Path(__file__).resolve().parent / "data" / "devil.dict.dz"
CORPUS_SHA256 = "995ca92760d677965cb2780e78b808e982f9d49e8c12d795c1854476bbf13819"
# preflight's bounds (kit.manifest.workload defines them once): a text that is tokenized whole (text, random,
# shared-prefix, multi-turn), a data file of records (sharegpt, jsonl)
MAX_TEXT_BYTES = bounds.MAX_TEXT_BYTES
MAX_DATA_BYTES = bounds.MAX_PINNED_BYTES
MAX_TRIES = 6  # window-size corrections per start
MAX_SHIFTS = 128  # starts tried, a token apart
_CHUNK = 1 << 20


def read_pinned(path: Path, sha256: str, what: str, limit: int = MAX_DATA_BYTES) -> bytes:
    """The file's bytes when they hash to ``sha256`` (a clear error naming the file otherwise). Opened as
    ``open_regular`` opens it (a FIFO, device or directory is refused at once, never waited on: preflight checked
    the file, but it may have been replaced since); the open file's size is checked against ``limit`` before
    anything is read, and at most ``limit + 1`` bytes are read (a file that grows, or one whose size says 0)."""
    chunks: list[bytes] = []
    got_bytes = 0
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size  # of the file opened, not of whatever the path names a moment later
            if size > limit:
                raise _too_large(path, what, f"is {size} bytes", limit)
            while chunk := f.read(min(_CHUNK, limit + 1 - got_bytes)):
                got_bytes += len(chunk)
                chunks.append(chunk)
                if got_bytes > limit:
                    raise _too_large(path, what, f"has more than {limit} bytes (its size said {size})", limit)
    except OSError as exc:
        why = exc.strerror if exc.strerror else str(exc).removeprefix(f"{path}: ")
        raise ManifestError(f"{what}: cannot read {path} ({why})", hint="give a regular file; the path is relative "
                            "to kit's working directory, like model.path") from None
    data = b"".join(chunks)
    got = hashlib.sha256(data).hexdigest()
    if got != sha256:
        raise ManifestError(f"{what}: {path} has sha256 {got}, but the manifest pins {sha256}",
                            hint="the file changed since the manifest was signed: restore it, or re-pin it "
                                 "(sha256sum FILE) and sign the manifest again")
    return data


def _too_large(path: Path, what: str, much: str, limit: int) -> ManifestError:
    return ManifestError(f"{what}: {path} {much}, over kit's {limit >> 20} MiB bound for this dataset kind",
                         hint="use a smaller file (docs/workload.md, Datasets, gives each kind's bound), then pin it "
                              "(sha256sum FILE) and sign the manifest again")


def corpus_text() -> str:
    data = read_pinned(CORPUS, CORPUS_SHA256, "the shipped corpus")
    return gzip.decompress(data).decode("utf-8")


def decode_text(data: bytes, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    if len(data) > limit:
        raise ManifestError(f"{what}: {len(data)} bytes, over kit's {limit >> 20} MiB bound for this dataset kind",
                            hint="give a smaller file (docs/workload.md, Datasets, gives each kind's bound)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{what}: not UTF-8 text ({exc})") from exc
    if not text.split():
        raise ManifestError(f"{what}: the text is empty")
    return text


class Cutter:
    """Exactly-``n``-token texts from ``text`` by ``counter``; deterministic for (text, counter, seed). ``ids``:
    ``counter.encode(text)`` when the caller has it already (one encoding of the text for every seed)."""

    def __init__(self, counter: Counter, text: str, seed: int, ids: list[int] | None = None) -> None:
        self.counter = counter
        self.ids = counter.encode(text) if ids is None else ids
        if len(self.ids) < 2:
            raise ManifestError("the dataset's text has fewer than 2 tokens")
        rng = random.Random(seed)
        self.offset = rng.randrange(len(self.ids))
        self.mult = rng.randrange(1, len(self.ids)) | 1

    def start(self, index: int) -> int:
        return (self.offset + index * self.mult) % len(self.ids)

    def window(self, start: int, k: int) -> list[int]:
        ids, n = self.ids, len(self.ids)
        out: list[int] = []
        while len(out) < k:  # wraps around the text
            take = min(k - len(out), n - start)
            out += ids[start:start + take]
            start = 0
        return out

    def cut(self, n: int, start: int) -> tuple[str, int]:
        """A text that re-encodes to exactly ``n`` tokens, and ``n``. The window is widened or narrowed by the miss,
        then its neighbours (n-2..n+2 tokens) are tried, then its start is moved on a token (a window that starts or
        ends inside a multi-byte character decodes to a replacement character and re-encodes to another count), up
        to ``MAX_SHIFTS`` starts. Where none re-encodes to ``n`` (a tokenizer that cannot produce exactly ``n``
        tokens from this text) a ManifestError says so: a prompt is never silently of another length."""
        closest: tuple[int, int] | None = None  # (|miss|, count)
        for shift in range(MAX_SHIFTS):
            at = (start + shift) % len(self.ids)
            tried: set[int] = set()
            k = n
            for _ in range(MAX_TRIES):
                if k in tried:
                    break
                tried.add(k)
                text = self.counter.decode(self.window(at, k))
                count = len(self.counter.encode(text))
                if count == n:
                    return text, count
                if closest is None or abs(count - n) < closest[0]:
                    closest = (abs(count - n), count)
                k = max(1, k + (n - count))
            for k in range(max(1, n - 2), n + 3):
                if k in tried:
                    continue
                text = self.counter.decode(self.window(at, k))
                if len(self.counter.encode(text)) == n:
                    return text, n
        assert closest is not None
        raise ManifestError(
            f"load.dataset: no cut of the text re-encodes to exactly {n} tokens with tokenizer {self.counter.name} "
            f"(tried {MAX_SHIFTS} starts from token {start}; the closest counts {closest[1]})",
            hint="use a text this tokenizer can cut exactly (the shipped corpus, or text with fewer multi-byte "
                 "characters per token), or another prompt length")
