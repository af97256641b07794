"""One log pump: copy a server's output into its log file, secrets redacted (``kit.plumbing.redact``), the file
bounded. Servers' stdout (process runtime), container logs (docker runtime) and each rank's output (runtime slurm)
all go through it.

Redaction sees the stream, not pieces of it: a line is written once it ends, a line longer than MAX_LINE in pieces,
and before a cut that is not a line end the characters a secret could start in are held back until the next piece
(``StreamRedactor``), so a secret split across reads or across a cut is masked all the same.

The log keeps at most ``limit`` bytes (``server.log_limit_mb``, default 256 MiB): the first ``limit - tail`` bytes
(the head) and the last ``tail`` bytes (TAIL_MAX, or a quarter of a smaller limit), with one line between them
saying how many bytes of the server's output were left out (``dropped_bytes``, which the cell's stop record keeps).
The pipe is drained all the while (what is left out is read and dropped, never left to block the server); the tail
is rewritten behind the head at most once every TAIL_FLUSH_S while output comes, and at the end.

``finish`` ends a pump whose stream may not end by itself (a container's log API delivers a flood far slower than
the container wrote it): it waits, then cuts the stream, which ends the pump at its next chunk with the log complete
as far as it was read and ``error`` saying so; a pump that still does not end is abandoned, and writes nothing more
(the log is final once ``finish`` returns, whatever the thread does later: the bundle is hashed after it).
"""

from __future__ import annotations

import codecs
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import IO

from kit.plumbing.redact import StreamRedactor, redact_range, rule

MAX_LINE = 1 << 20  # a line longer than this is written in pieces rather than held in memory
LOG_LIMIT_BYTES = 256 << 20  # server.log_limit_mb's default
TAIL_MAX = 4 << 20  # the most a capped log keeps of the output's end
TAIL_FLUSH_S = 1.0
CUT_NOTE = "the log was cut when the server stopped: output after it was never read (nor counted as left out)"


def pipe_chunks(src: IO[bytes]) -> Iterable[bytes]:
    """A child's output as it comes (a line at a time, or less when a line is very long)."""
    return iter(partial(src.readline, 1 << 16), b"")


def cut_marker(dropped: int, limit: int) -> bytes:
    return (f"[kit: {dropped} bytes of the server's output left out here: this log keeps its first and last bytes, "
            f"{limit} in all (server.log_limit_mb)]\n").encode()


class _Tail:
    """The newest ``keep`` bytes of raw output (at least), as chunks; ``dropped``: the bytes let go before them."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.chunks: deque[bytes] = deque()
        self.size = 0
        self.dropped = 0

    def add(self, data: bytes) -> None:
        if not data:
            return
        self.chunks.append(data)
        self.size += len(data)
        while self.size - len(self.chunks[0]) >= self.keep:
            old = self.chunks.popleft()
            self.size -= len(old)
            self.dropped += len(old)

    def text(self) -> tuple[str, int]:
        """The last ``keep`` bytes, decoded; and the bytes before them let go."""
        data = b"".join(self.chunks)
        extra = max(0, len(data) - self.keep)
        return data[extra:].decode("utf-8", "replace"), self.dropped + extra


def _within(text: str, keep: int) -> tuple[str, int]:
    """``text`` less what makes its UTF-8 longer than ``keep`` bytes, cut from its start, and the output bytes that
    cut left out. The tail keeps ``keep`` bytes of raw output, but each invalid byte decodes to U+FFFD, 3 bytes: a
    server writing 0xff bytes made a log half again as long as server.log_limit_mb (found 2026-12-07)."""
    data = text.encode()
    over = len(data) - keep
    if over <= 0:
        return text, 0
    while over < len(data) and data[over] & 0xC0 == 0x80:  # not inside a character
        over += 1
    gone = data[:over].decode()
    return data[over:].decode(), len(data[:over]) - 2 * gone.count("\ufffd")  # a U+FFFD stood for one byte


class LogPump(threading.Thread):
    """A daemon thread that appends ``chunks()`` to ``log_path``, redacted and bounded (see the module).
    ``error`` holds what stopped it early (an exception's text), ``bytes_written`` what the log holds of it,
    ``dropped_bytes`` the server's output left out of the log."""

    def __init__(self, chunks: Callable[[], Iterable[bytes]], log_path: Path, name: str,
                 errors: tuple[type[BaseException], ...] = (OSError,), limit: int = LOG_LIMIT_BYTES) -> None:
        super().__init__(daemon=True, name=name)
        self.chunks = chunks
        self.log_path = log_path
        self.errors = errors
        self.limit = limit
        self.tail_keep = min(TAIL_MAX, limit // 4)
        self.error: str | None = None
        self.bytes_written = 0
        self.dropped_bytes = 0
        self._head = 0  # bytes of the head written
        self._head_newline = True  # the head ends a line
        self._base = 0  # where this pump's output starts in the file
        self._tail: _Tail | None = None
        self._flushed = 0.0
        self._cut = threading.Event()  # finish(): stop at the next chunk
        self._lock = threading.Lock()  # held by every write; finish() takes it to abandon the pump
        self._abandoned = False

    def run(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self.log_path.open("ab") as out:
                self._base = out.tell()
                self._pump(out)
        except self.errors as e:
            self.error = f"{type(e).__name__}: {e}"

    def _pump(self, out: IO[bytes]) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        stream = StreamRedactor(MAX_LINE)
        try:
            for chunk in self.chunks():
                if self._cut.is_set():
                    self.error = self.error or CUT_NOTE
                    break
                if self._tail is not None:
                    self._tail.add(chunk)
                    if time.monotonic() - self._flushed >= TAIL_FLUSH_S:
                        self._write_tail(out, final=False)
                    continue
                self._write_head(out, stream.feed(decoder.decode(chunk)).encode(),
                                 lambda: stream.pending.encode() + decoder.getstate()[0])
            if self._tail is None:  # what the redactor held back, masked: it was read
                self._write_head(out, (stream.feed(decoder.decode(b"", final=True)) + stream.end()).encode(),
                                 lambda: b"")
        finally:
            if self._tail is not None:
                self._write_tail(out, final=True)

    def finish(self, timeout: float, close: Callable[[], None], grace: float = 2.0) -> None:
        """Wait up to ``timeout`` s for the stream to end; then cut it (``close`` it, and stop at the next chunk)
        and wait ``grace`` s more; a pump still running then is abandoned: it writes nothing more."""
        self.join(timeout)
        if not self.is_alive():
            return
        self._cut.set()
        close()
        self.join(grace)
        if self.is_alive():
            with self._lock:
                self._abandoned = True
                self.error = f"{CUT_NOTE}; the log's reader did not end and was abandoned"

    def _write_head(self, out: IO[bytes], data: bytes, unwritten: Callable[[], bytes]) -> None:
        with self._lock:
            if not self._abandoned:
                self._write_head_locked(out, data, unwritten)

    def _write_head_locked(self, out: IO[bytes], data: bytes, unwritten: Callable[[], bytes]) -> None:
        """Write redacted ``data`` while the head has room; past it, what is left of it and ``unwritten()`` (the
        raw output not written yet) begin the tail."""
        room = max(0, self.limit - self.tail_keep - self._head)
        if len(data) > room:
            while room > 0 and data[room] & 0xC0 == 0x80:  # not inside a character
                room -= 1
            self._tail = _Tail(self.tail_keep)
            self._tail.add(data[room:] + unwritten())
            data = data[:room]
        if data:
            out.write(data)
            out.flush()
            self._head += len(data)
            self._head_newline = data.endswith(b"\n")
        self.bytes_written = self._head
        if self._tail is not None:
            self._write_tail_locked(out, final=False)

    def _write_tail(self, out: IO[bytes], final: bool) -> None:
        with self._lock:
            if not self._abandoned:
                self._write_tail_locked(out, final)

    def _write_tail_locked(self, out: IO[bytes], final: bool) -> None:
        """Rewrite what follows the head: the cut's marker (once output was left out) and the tail, redacted (its
        start as a cut, unless nothing was left out; its end as one until the output has ended)."""
        assert self._tail is not None
        text, dropped = self._tail.text()
        reach = rule().reach
        start = min(len(text), reach) if dropped else 0
        end = len(text) if final else max(start, len(text) - reach)
        shown, first, _ = redact_range(text, start, end)
        shown, trimmed = _within(shown, self.tail_keep)
        self.dropped_bytes = dropped + len(text[:first].encode()) + trimmed if dropped or first or trimmed else 0
        data = shown.encode()
        if self.dropped_bytes:
            data = (b"" if self._head_newline else b"\n") + cut_marker(self.dropped_bytes, self.limit) + data
        out.seek(self._base + self._head)
        out.truncate()
        out.write(data)
        out.flush()
        self.bytes_written = self._head + len(data)
        self._flushed = time.monotonic()
