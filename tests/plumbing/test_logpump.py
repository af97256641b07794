"""LogPump: the stream written as it came, secrets masked even across chunk borders and the cuts of a long line."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

from kit.plumbing.logpump import MAX_LINE, LogPump
from kit.plumbing.redact import secrets_added

SECRET = "hf_Qz7/Pa+ss<Secret>Xk9Vw2LmNb"


def _pump(tmp_path: Path, chunks: Iterable[bytes]) -> tuple[LogPump, bytes]:
    log = tmp_path / "logs" / "server.log"
    pump = LogPump(lambda: iter(chunks), log, name="test-pump")
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
    assert pump.error is None and pump.bytes_written == len(text)


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
