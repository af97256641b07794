"""One log pump: copy a server's output into its log file, secrets redacted (``kit.plumbing.redact``). Servers'
stdout (process runtime), container logs (docker runtime) and each rank's output (runtime slurm) all go through it.

Redaction sees the stream, not pieces of it: a line is written once it ends, a line longer than MAX_LINE in pieces,
and before a cut that is not a line end the characters a secret could start in are held back until the next piece
(``StreamRedactor``), so a secret split across reads or across a cut is masked all the same.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import IO

from kit.plumbing.redact import StreamRedactor

MAX_LINE = 1 << 20  # a line longer than this is written in pieces rather than held in memory


def pipe_chunks(src: IO[bytes]) -> Iterable[bytes]:
    """A child's output as it comes (a line at a time, or less when a line is very long)."""
    return iter(partial(src.readline, 1 << 16), b"")


class LogPump(threading.Thread):
    """A daemon thread that appends ``chunks()`` to ``log_path``, redacted (see the module).
    ``error`` holds what stopped it early (an exception's text), ``bytes_written`` what it wrote."""

    def __init__(self, chunks: Callable[[], Iterable[bytes]], log_path: Path, name: str,
                 errors: tuple[type[BaseException], ...] = (OSError,)) -> None:
        super().__init__(daemon=True, name=name)
        self.chunks = chunks
        self.log_path = log_path
        self.errors = errors
        self.error: str | None = None
        self.bytes_written = 0

    def run(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.log_path.open("ab") as out:
                self._pump(out)
        except self.errors as e:
            self.error = f"{type(e).__name__}: {e}"

    def _pump(self, out: IO[bytes]) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        stream = StreamRedactor(MAX_LINE)
        for chunk in self.chunks():
            self._write(out, stream.feed(decoder.decode(chunk)).encode())
        self._write(out, (stream.feed(decoder.decode(b"", final=True)) + stream.end()).encode())

    def _write(self, out: IO[bytes], data: bytes) -> None:
        if data:
            out.write(data)
            out.flush()
            self.bytes_written += len(data)
