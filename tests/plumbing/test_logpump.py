"""LogPump: lines re-cut from chunks, secrets redacted even across chunk borders, long lines in pieces."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kit.plumbing.logpump import MAX_LINE, LogPump, split_lines


def _pump(tmp_path: Path, chunks: list[bytes], redact: object = None) -> tuple[LogPump, bytes]:
    log = tmp_path / "logs" / "server.log"
    fn = redact if callable(redact) else (lambda s: s.replace("hunter2", "***"))
    pump = LogPump(lambda: iter(chunks), log, fn, name="test-pump")
    pump.start()
    pump.join(10)
    assert not pump.is_alive()
    return pump, log.read_bytes()


def test_secrets_are_redacted_even_when_split_across_chunks(tmp_path: Path) -> None:
    pump, text = _pump(tmp_path, [b"token=hun", b"ter2 ok\nsecond ", b"line hunter2\nlast, no newline"])
    assert text == b"token=*** ok\nsecond line ***\nlast, no newline"
    assert pump.error is None and pump.bytes_written == len(text)


def test_a_long_line_is_written_in_pieces_and_nothing_is_lost(tmp_path: Path) -> None:
    long = b"a" * (MAX_LINE + 10)
    pieces = list(split_lines([long[: MAX_LINE // 2], long[MAX_LINE // 2 :] + b"\nend\n"]))
    assert b"".join(pieces).replace(b"\n", b"") == long + b"end"
    assert max(len(p) for p in pieces) <= MAX_LINE + 11
    _, text = _pump(tmp_path, [long[:1000], long[1000:], b"\nend\n"])
    assert text.replace(b"\n", b"") == long + b"end" and text.endswith(b"end\n")


def test_invalid_utf8_is_replaced_not_fatal(tmp_path: Path) -> None:
    pump, text = _pump(tmp_path, [b"bad \xff byte\n"])
    assert text == "bad \ufffd byte\n".encode() and pump.error is None


def test_a_failing_stream_is_recorded(tmp_path: Path) -> None:
    def broken() -> Iterator[bytes]:
        yield b"one\n"
        raise OSError("stream lost")

    log = tmp_path / "x.log"
    pump = LogPump(broken, log, lambda s: s, name="broken")
    pump.start()
    pump.join(10)
    assert pump.error == "OSError: stream lost" and log.read_bytes() == b"one\n"
