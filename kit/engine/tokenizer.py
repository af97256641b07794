"""The engine's toy tokenizer: one token per whitespace-separated word, by a stable hash."""

from __future__ import annotations

import zlib


def encode(text: str, vocab: int) -> list[int]:
    """Token ids of ``text``: every whitespace-separated word hashed with CRC-32, modulo ``vocab``."""
    return [zlib.crc32(word.encode("utf-8")) % vocab for word in text.split()]


def decode_token(token: int) -> str:
    """Text of one generated token: a space and ``w<id>`` (so the output is easy to recognise)."""
    return f" w{token}"
