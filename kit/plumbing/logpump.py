"""One log pump: copy a byte stream into a log file line by line, passing every line through a filter
(secret redaction) first. Servers' stdout (process runtime) and container logs (docker runtime) both
go through it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import IO

MAX_LINE = 1 << 20  # a line longer than this is written in pieces rather than held in memory


def pipe_chunks(src: IO[bytes]) -> Iterable[bytes]:
    """A child's output as it comes (a line at a time, or less when a line is very long)."""
    return iter(partial(src.readline, 1 << 16), b"")


def split_lines(chunks: Iterable[bytes]) -> Iterable[bytes]:
    """Re-cut arbitrary chunks into lines (each ending in b"\\n", except perhaps the last)."""
    pending = b""
    for chunk in chunks:
        pending += chunk
        lines = pending.split(b"\n")
        pending = lines.pop()
        if len(pending) > MAX_LINE:
            lines.append(pending)
            pending = b""
        for line in lines:
            yield line + b"\n"
    if pending:
        yield pending


class LogPump(threading.Thread):
    """A daemon thread that appends ``split_lines(chunks)`` to ``log_path`` through ``redact``.
    ``error`` holds what stopped it early (an exception's text), ``bytes_written`` what it wrote."""

    def __init__(self, chunks: Callable[[], Iterable[bytes]], log_path: Path, redact: Callable[[str], str],
                 name: str, errors: tuple[type[BaseException], ...] = (OSError,)) -> None:
        super().__init__(daemon=True, name=name)
        self.chunks = chunks
        self.log_path = log_path
        self.redact = redact
        self.errors = errors
        self.error: str | None = None
        self.bytes_written = 0

    def run(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.log_path.open("ab") as out:
                for line in split_lines(self.chunks()):
                    data = self.redact(line.decode("utf-8", "replace")).encode()
                    out.write(data)
                    out.flush()
                    self.bytes_written += len(data)
        except self.errors as e:
            self.error = f"{type(e).__name__}: {e}"
