"""Deterministic prompts and request bodies (pure Python, safe on both sides of the process split).

A prompt is ``prompt_tokens`` words: a unique first word naming the request index (so no two requests of
a level share a cached prefix), then a window of a seeded word stream. The window start moves with the
index, so prompts differ throughout, and building one is a string slice, not a loop over words.
"""

from __future__ import annotations

import json
import random

from kit.plumbing.jsontypes import loads

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
ENDPOINT_PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


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
    """Request bodies as bytes for one endpoint; only the prompt changes between requests. ``extra``: more body
    fields (load.request: temperature, top_p, seed, extra_body), the same in every request."""

    def __init__(self, endpoint: str, model: str, output_tokens: int, prompts: PromptSource,
                 dialect: str = "sglang", extra: dict[str, object] | None = None) -> None:
        self.prompts = prompts
        common = {"model": model, "max_tokens": output_tokens, **fixed_length_fields(dialect), **(extra or {})}
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


class WorkloadBodies:
    """Request bodies from a workload file (``kit.files.workload``: line i is request i), built once as bytes.

    Each body is the item's ``messages`` (chat) or ``prompt`` (completions) and ``max_tokens``, kit's fixed-length
    fields, then ``extra``; with ``seed_per_request`` the body's ``seed`` is ``extra["seed"] + i``.
    ``expected[i]`` is the prompt tokens the server should count (None: unknown), ``max_tokens[i]`` what it asked.
    """

    def __init__(self, path: str, endpoint: str, model: str, dialect: str = "sglang",
                 extra: dict[str, object] | None = None, seed_per_request: bool = False) -> None:
        if endpoint not in ENDPOINT_PATHS:
            raise ValueError(f"unknown endpoint {endpoint!r}")
        fixed = fixed_length_fields(dialect)
        extra = dict(extra or {})
        base_seed = extra.get("seed")
        self.bodies: list[bytes] = []
        self.expected: list[int | None] = []
        self.max_tokens: list[int] = []
        with open(path, "rb") as f:
            for i, line in enumerate(f):
                item = loads(line)
                if item.get("i") != i:
                    raise ValueError(f"{path}: line {i + 1} holds request {item.get('i')}, not {i}")
                content = {"messages": item["messages"]} if endpoint == "chat" else {"prompt": item["prompt"]}
                body = {"model": model, **content, "max_tokens": item["max_tokens"], **fixed, **extra}
                if seed_per_request and isinstance(base_seed, int):
                    body["seed"] = base_seed + i
                self.bodies.append(json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode())
                self.expected.append(item.get("prompt_tokens"))
                self.max_tokens.append(int(item["max_tokens"]))
        if not self.bodies:
            raise ValueError(f"{path}: the workload holds no request")

    def body(self, index: int) -> bytes:
        return self.bodies[index]


def prompt_problem(usage: object, expected: int | None) -> str | None:
    """Why the server's ``usage.prompt_tokens`` differs from the workload's count by more than one token (None:
    within one, or either is unknown). One token of slack: a tokenizer's merge across the template's boundary."""
    if expected is None or isinstance(usage, bool) or not isinstance(usage, int):
        return None
    if abs(usage - expected) <= 1:
        return None
    return f"server counted {usage} prompt tokens, the workload's tokenizer {expected}"

