"""Deterministic prompts and request bodies (pure Python, safe on both sides of the process split).

A prompt is ``prompt_tokens`` words: a unique first word naming the request index (so no two requests of
a level share a cached prefix), then a window of a seeded word stream. The window start moves with the
index, so prompts differ throughout, and building one is a string slice, not a loop over words.
"""

from __future__ import annotations

import json
import random

WORDS = (  # noqa: SIM905 - a word list reads best as text
    "the of and to in is was for on that with as by at from it an be this are or have which one had "
    "not but all were when we there can more if no out so said what up its about into than them only "
    "other new some time could these two may then first any like now my such over our even most made "
    "after also did many before must through back years where much your way well down should because "
    "each just those people how too little state good very make world still own see men work long "
    "get here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three small house large water light "
    "river stone garden market engine signal window letter number system question answer table paper "
    "music ocean mountain forest winter summer morning evening silver golden quiet bright simple "
    "careful rapid gentle narrow ancient modern hollow steady"
).split()


class PromptSource:
    """``prompt(i)`` returns the same text for the same (seed, words, i) in every process."""

    def __init__(self, seed: int, words: int, span: int = 4096) -> None:
        if words < 1:
            raise ValueError("a prompt needs at least one word")
        self.words = words
        self.span = span
        rng = random.Random(seed)
        stream = rng.choices(WORDS, k=words - 1 + span)
        # character offset of every word start, plus the end, so a window is one slice
        self._text = " ".join(stream)
        offsets = [0]
        for w in stream:
            offsets.append(offsets[-1] + len(w) + 1)
        self._offsets = offsets
        self._mult = rng.randrange(1, span) | 1

    def prompt(self, index: int) -> str:
        rest = self.words - 1
        head = f"q{index}"
        if rest == 0:
            return head
        start = (index * self._mult) % self.span
        a = self._offsets[start]
        b = self._offsets[start + rest] - 1
        return f"{head} {self._text[a:b]}"


DIALECTS = ("sglang", "transformers")


def fixed_length_fields(dialect: str) -> dict[str, object]:
    """How a request asks for exactly ``max_tokens`` tokens (no early end of sequence) and for usage.

    ``sglang`` (also vLLM and kit's engine): ``ignore_eos`` and ``stream_options.include_usage``.
    ``transformers`` (``transformers serve``): it rejects ``ignore_eos`` (422), ignores ``stream_options``
    (with a warning per request) and always sends usage; its end of sequence is turned off with a
    ``generation_config`` given as a JSON *string*.
    """
    if dialect == "sglang":
        return {"ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if dialect == "transformers":
        return {"stream": True, "generation_config": json.dumps({"eos_token_id": -1})}
    raise ValueError(f"unknown request dialect {dialect!r} (known: {', '.join(DIALECTS)})")


class BodyBuilder:
    """Request bodies as bytes for one endpoint; only the prompt changes between requests."""

    def __init__(self, endpoint: str, model: str, output_tokens: int, prompts: PromptSource,
                 dialect: str = "sglang") -> None:
        self.prompts = prompts
        common = {"model": model, "max_tokens": output_tokens, **fixed_length_fields(dialect)}
        tail = json.dumps(common, separators=(",", ":"))[1:]  # without the opening brace
        if endpoint == "chat":
            self._head = b'{"messages":[{"role":"user","content":"'
            self._tail = b'"}],' + tail.encode()
        elif endpoint == "completions":
            self._head = b'{"prompt":"'
            self._tail = b'",' + tail.encode()
        else:
            raise ValueError(f"unknown endpoint {endpoint!r}")

    def body(self, index: int) -> bytes:
        # the prompt is [a-z0-9 ] only, so it needs no JSON escaping
        return self._head + self.prompts.prompt(index).encode() + self._tail


ENDPOINT_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}
