"""How prompts are counted: the served model's Hugging Face tokenizer (transformers' ``AutoTokenizer`` from a local
directory, its own ``apply_chat_template`` for chat requests), or ``words`` (kit's engine: one token per
whitespace-separated word, the messages joined by newlines, no template).

A chat request's expected ``usage.prompt_tokens`` is its *templated* count, computed per request with the
tokenizer's own chat template (``add_generation_prompt=True``), so the template's overhead is accounted for
exactly rather than estimated; ``template_overhead`` (the tokens the template adds around one user message) is
measured once for the report.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Protocol

from kit.errors import ManifestError

Messages = list[dict[str, str]]


class Counter(Protocol):
    name: str
    sha256: str | None
    vocab_size: int | None  # the tokenizer's base vocabulary (None: words, which has none)

    def encode(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...
    def count_chat(self, messages: Messages) -> int: ...
    def count_prompt(self, prompt: str) -> int: ...


class WordCounter:
    """kit's engine (kit.engine.tokenizer): a token is a whitespace-separated word; "ids" index ``self.vocab``."""

    name = "words"
    sha256: str | None = None
    vocab_size: int | None = None

    def __init__(self) -> None:
        self.vocab: list[str] = []
        self._ids: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        out = []
        for w in text.split():
            if w not in self._ids:
                self._ids[w] = len(self.vocab)
                self.vocab.append(w)
            out.append(self._ids[w])
        return out

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.vocab[i] for i in ids)

    def count_chat(self, messages: Messages) -> int:
        return len("\n".join(m["content"] for m in messages).split())

    def count_prompt(self, prompt: str) -> int:
        return len(prompt.split())


class HfCounter:
    """The tokenizer in ``path`` (tokenizer.json and its config, as the server loads them), offline."""

    def __init__(self, path: Path) -> None:
        if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
            raise ManifestError(f"load.tokenizer: {path} holds no tokenizer (no tokenizer.json nor its config)",
                                hint="point load.tokenizer (or model.path) at the model's directory, or use 'words' "
                                     "for kit's engine")
        from transformers import AutoTokenizer  # 3 s to import: only token-exact workloads need it

        try:
            self.tok: Any = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ManifestError(f"load.tokenizer: cannot load the tokenizer in {path}: {exc}",
                                hint="is it a Hugging Face model directory?") from exc
        self.name = str(path)
        tj = path / "tokenizer.json"
        self.sha256 = hashlib.sha256(tj.read_bytes()).hexdigest() if tj.is_file() else None
        self.has_template = bool(getattr(self.tok, "chat_template", None))
        size = getattr(self.tok, "vocab_size", None)
        self.vocab_size: int | None = size if isinstance(size, int) and size > 1 else None

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def count_chat(self, messages: Messages) -> int:
        if not self.has_template:
            raise ManifestError(f"load.tokenizer: {self.name} has no chat template, so a chat request's prompt "
                                "tokens cannot be counted", hint="use load.endpoint: completions")
        got = self.tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        ids = got["input_ids"] if hasattr(got, "keys") else got
        return len(ids)

    def count_prompt(self, prompt: str) -> int:
        return len(self.tok.encode(prompt))  # with the special tokens the server adds (a BOS, for some)


def template_overhead(counter: Counter) -> int:
    """Tokens a chat template adds around one user message (``count_chat`` minus the text's own count)."""
    text = "hello"
    return counter.count_chat([{"role": "user", "content": text}]) - len(counter.encode(text))


def counter_for(tokenizer: str | None, model_path: str | None) -> Counter:
    """``load.tokenizer`` if given, else ``model.path`` when it holds a tokenizer, else words."""
    if tokenizer == "words":
        return WordCounter()
    where = tokenizer or model_path
    if where is None:
        return WordCounter()
    path = Path(where).expanduser()
    if tokenizer is None and not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        return WordCounter()
    return HfCounter(path)
