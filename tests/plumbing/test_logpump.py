"""LogPump: the stream written as it came, secrets masked even across chunk borders and the cuts of a long line,
the file bounded by its limit (head, one marker line, tail) while the stream is drained to its end."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from kit.plumbing import logpump
from kit.plumbing.logpump import MAX_LINE, LogPump, cut_marker
from kit.plumbing.redact import secrets_added

SECRET = "hf_Qz7/Pa+ss<Secret>Xk9Vw2LmNb"


def _pump(tmp_path: Path, chunks: Iterable[bytes], limit: int = logpump.LOG_LIMIT_BYTES) -> tuple[LogPump, bytes]:
    log = tmp_path / "logs" / "server.log"
    pump = LogPump(lambda: iter(chunks), log, name="test-pump", limit=limit)
    pump.start()
    pump.join(60)
    assert not pump.is_alive()
    return pump, log.read_bytes()


def _pieces(data: bytes, size: int = 1 << 16) -> list[bytes]:
    """As ``pipe_chunks`` reads a pipe: at most 64 KiB a read, never past a line's end."""
    out = []
    for line in data.splitlines(keepends=True):
        out += [line[i:i + size] for i in range(0, len(line), size)]
    return out


def test_secrets_are_redacted_even_when_split_across_chunks(tmp_path: Path) -> None:
    with secrets_added(["hunter2"]):
        pump, text = _pump(tmp_path, [b"token=hun", b"ter2 ok\nsecond ", b"line hunter2\nlast, no newline"])
    assert text == b"token=*** ok\nsecond line ***\nlast, no newline"
    assert pump.error is None and pump.bytes_written == len(text) and pump.dropped_bytes == 0


def test_a_long_line_is_written_whole_and_nothing_is_lost(tmp_path: Path) -> None:
    long = b"a" * (3 * MAX_LINE + 10)
    _, text = _pump(tmp_path, [long[:1000], long[1000:], b"\nend\n"])
    assert text == long + b"\nend\n"  # in pieces, but no line break added


@pytest.mark.parametrize("offset", [17 * 65536 - 10, MAX_LINE - 5, MAX_LINE, 2 * MAX_LINE + 3])
def test_a_secret_across_the_cut_of_a_long_line_is_masked(tmp_path: Path, offset: int) -> None:
    """Review 21: the old pump cut a line at 1 MiB (the 17th read of 64 KiB) and masked each piece alone, so a secret
    across the cut stayed in the log (as 'hf_PASSSEC\\nRETabc...')."""
    line = b"z" * offset + SECRET.encode() + b"z" * (3 * MAX_LINE - offset) + b"\n"
    with secrets_added([SECRET]):
        _, text = _pump(tmp_path, _pieces(line + b"after " + SECRET.encode() + b"\n"))
    assert text == b"z" * offset + b"***" + b"z" * (3 * MAX_LINE - offset) + b"\nafter ***\n"


def test_a_multiline_secret_is_masked_across_reads(tmp_path: Path) -> None:
    key = "-----BEGIN KEY-----\nQz7Pa+ss9Vw2LmNbXk\n-----END KEY-----"
    data = f"start\nkey {key} done\nend\n".encode()
    with secrets_added([key]):
        _, text = _pump(tmp_path, [data[i:i + 3] for i in range(0, len(data), 3)])
    assert text == b"start\nkey *** done\nend\n"


def test_a_log_past_its_limit_keeps_its_head_and_tail_and_says_what_it_left_out(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file never passes its limit (looked at after every read, the tail rewritten every time), keeps the first
    bytes and the last, and between them one line with the exact count of bytes left out; the stream is read to
    its end."""
    monkeypatch.setattr(logpump, "TAIL_FLUSH_S", 0.0)
    limit = 64 << 10
    stream = b"first line\n" + b"".join(b"line %07d %s\n" % (i, b"x" * 400) for i in range(5000)) + b"last line\n"
    log = tmp_path / "logs" / "server.log"
    sizes: list[int] = []

    def chunks() -> Iterator[bytes]:
        for piece in _pieces(stream, 4096):
            yield piece
            sizes.append(log.stat().st_size if log.exists() else 0)

    pump = LogPump(chunks, log, name="test-pump", limit=limit)
    pump.start()
    pump.join(60)
    data = log.read_bytes()
    head, tail = limit - limit // 4, limit // 4
    dropped = len(stream) - head - tail
    assert pump.dropped_bytes == dropped and pump.bytes_written == len(data) and pump.error is None
    assert data == stream[:head] + b"\n" + cut_marker(dropped, limit) + stream[-tail:]
    assert len(sizes) > 100 and max(sizes) <= limit + 200


def test_invalid_bytes_past_the_limit_keep_the_log_within_it(tmp_path: Path) -> None:
    """An outside review (2026-12-07): a server writing 0xff bytes got a server.log half again as long as its
    limit (12.6 MB for 8 MiB): the tail kept its raw bytes, and each decodes to U+FFFD, three bytes."""
    limit = 64 << 10
    stream = b"first line\n" + b"".join(b"\x1b[31m" + b"\xff" * 400 + b"\n" for _ in range(2000))
    pump, data = _pump(tmp_path, _pieces(stream, 4096), limit=limit)
    assert len(data) <= limit + 200, len(data)  # the marker line beside the limit, as ever
    assert data.startswith(b"first line\n") and data.endswith("\ufffd\n".encode())
    assert pump.bytes_written == len(data) and pump.dropped_bytes > 0


def test_secrets_at_the_edges_of_a_cut_log_are_masked(tmp_path: Path) -> None:
    """A secret across the head's end, one across the tail's start (the part before it left out) and one at the very
    end: none shows, not even in part."""
    limit = 64 << 10
    head, tail = limit - limit // 4, limit // 4
    s = SECRET.encode()
    body = bytearray(b"." * 99 + b"\n") * (8 * limit // 100)
    body[head - 7:head - 7 + len(s)] = s  # across the head's end
    at = len(body) + len(s) - tail - 5  # across the tail's start (the stream ends with one more)
    body[at:at + len(s)] = s
    stream = bytes(body) + s
    with secrets_added([SECRET]):
        pump, data = _pump(tmp_path, _pieces(stream), limit)
    for i in range(len(SECRET) - 3):
        assert SECRET[i:i + 4].encode() not in data, SECRET[i:i + 4]
    assert data.count(b"***") >= 2 and data.endswith(b"***")
    assert len(data) <= limit + 200 and pump.dropped_bytes > 6 * limit


def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    pump, text = _pump(tmp_path, [b"bad \xff byte, split \xc3", b"\xa9 char\n"])
    assert text == "bad \ufffd byte, split \u00e9 char\n".encode() and pump.error is None


def test_a_failing_stream_is_recorded(tmp_path: Path) -> None:
    def broken() -> Iterator[bytes]:
        yield b"one\n"
        raise OSError("stream lost")

    log = tmp_path / "x.log"
    pump = LogPump(broken, log, name="broken")
    pump.start()
    pump.join(10)
    assert pump.error == "OSError: stream lost" and log.read_bytes() == b"one\n"


def test_finish_cuts_an_endless_stream_and_the_log_is_final_and_whole(tmp_path: Path) -> None:
    """A stream that never ends by itself (a container's log API still delivering a flood after the stop): finish
    cuts it at its next chunk; the log then holds every line read, bounded as ever, and says it was cut."""
    closed = threading.Event()

    def endless() -> Iterator[bytes]:
        n = 0
        while True:
            n += 1
            yield f"line {n} {SECRET}\n".encode() * 50
            time.sleep(0.001)

    log = tmp_path / "x.log"
    with secrets_added([SECRET]):
        pump = LogPump(endless, log, name="endless", limit=64 << 10)
        pump.start()
        time.sleep(0.3)
        pump.finish(0.2, closed.set)
        assert closed.is_set() and not pump.is_alive()
    assert pump.error == logpump.CUT_NOTE
    data = log.read_bytes()
    assert len(data) == pump.bytes_written <= (64 << 10) + 256 and b"left out here" in data
    assert SECRET.encode() not in data and data.endswith(b"\n") and data.startswith(b"line 1 ***\n")


def test_finish_abandons_a_reader_that_does_not_end_and_it_writes_nothing_more(tmp_path: Path) -> None:
    """A stream stuck in a read that closing does not end: finish gives up on the thread after its grace, and
    whatever that read returns later never reaches the log (the bundle is hashed after the stop)."""
    release = threading.Event()

    def stuck() -> Iterator[bytes]:
        yield b"before\n"
        release.wait(30)
        yield b"after\n" * 1000

    log = tmp_path / "x.log"
    pump = LogPump(stuck, log, name="stuck")
    pump.start()
    deadline = time.monotonic() + 10
    while (log.read_bytes() if log.exists() else b"") != b"before\n":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    pump.finish(0.1, lambda: None, grace=0.1)
    assert pump.is_alive() and pump.error is not None and "abandoned" in pump.error
    release.set()
    pump.join(10)
    assert not pump.is_alive() and log.read_bytes() == b"before\n"
