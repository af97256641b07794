"""The datasets (``load.dataset``): each turns its parameters, a text and a tokenizer into ``n`` requests' content,
as (messages, max_tokens, group) in index order. Where sglang's bench_serving has the dataset, its semantics are
kept (docs/workload.md names the differences)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kit.errors import ManifestError
from kit.manifest.workload import MAX_TOKENS, MultiTurnSet, RandomIdsSet, RandomSet, SharedPrefixSet, ShareGptSet
from kit.plumbing.jsontypes import TooDeep, loads
from kit.workload.corpus import Cutter
from kit.workload.tokens import Counter, Messages

MAX_LINES = 10_000_000
MAX_ITEM_CHARS = 4 << 20


@dataclass(frozen=True)
class Content:
    messages: Messages
    max_tokens: int
    content_tokens: int | None = None
    group: str | None = None


def user(text: str) -> Messages:
    return [{"role": "user", "content": text}]


def text_set(cut: Cutter, n: int, prompt_tokens: int, output_tokens: int) -> list[Content]:
    out = []
    for i in range(n):
        text, count = cut.cut(prompt_tokens, cut.start(i))
        out.append(Content(user(text), output_tokens, count))
    return out


def random_lengths(ds: RandomSet | RandomIdsSet, n: int, seed: int) -> tuple[list[int], list[int]]:
    """sglang's ``sample_random_requests`` lengths: numpy's legacy global generator (``np.random.seed(seed)``,
    then ``randint`` twice); output lengths below 1 become 1 (a request cannot ask for 0 tokens)."""
    inputs, outputs, _ = _random_draws(ds, n, seed, None)
    return inputs, outputs


def _random_draws(ds: RandomSet | RandomIdsSet, n: int, seed: int,
                  vocab_size: int | None) -> tuple[list[int], list[int], list[int]]:
    """The lengths, then with ``vocab_size`` random-ids' offsets (a third ``randint(0, vocab_size, n)``)."""
    import numpy as np

    rs = np.random.RandomState(seed)
    inputs = rs.randint(max(int(ds.input_len * ds.range_ratio), 1), ds.input_len + 1, size=n)
    outputs = rs.randint(int(ds.output_len * ds.range_ratio), ds.output_len + 1, size=n)
    offsets = [int(x) for x in rs.randint(0, vocab_size, size=n)] if vocab_size else []
    return [int(x) for x in inputs], [max(1, int(x)) for x in outputs], offsets


def random_set(ds: RandomSet, cut: Cutter, n: int, seed: int) -> list[Content]:
    inputs, outputs = random_lengths(ds, n, seed)
    out = []
    for i in range(n):
        text, count = cut.cut(inputs[i], cut.start(i))
        out.append(Content(user(text), outputs[i], count))
    return out


def random_ids_set(ds: RandomIdsSet, counter: Counter, n: int, seed: int) -> list[Content]:
    """sglang's random-ids, token-exact: request i's ids (offset_i + i + j) mod vocab, j < input_len_i, as text of
    exactly input_len_i tokens (decoded, then cut from the start of its own re-encoding, which wraps around)."""
    vocab = ds.vocab_size or counter.vocab_size
    if vocab is None:
        raise ManifestError("load.dataset (random-ids): the 'words' tokenizer has no vocabulary size",
                            hint="give load.dataset.vocab_size (kit's engine: its --vocab)")
    inputs, outputs, offsets = _random_draws(ds, n, seed, vocab)
    out = []
    for i in range(n):
        ids = [(offsets[i] + i + j) % vocab for j in range(inputs[i])]
        if counter.vocab_size is None:  # words: each id its own word
            text, count = " ".join(f"t{k}" for k in ids), inputs[i]
        else:
            text, count = Cutter(counter, counter.decode(ids), 0).cut(inputs[i], 0)
        out.append(Content(user(text), outputs[i], count))
    return out


def shared_prefix_set(ds: SharedPrefixSet, cut: Cutter, n: int, seed: int) -> list[Content]:
    """sglang's generated-shared-prefix: one user message "<system prompt>\\n\\n<question>", shuffled."""
    systems = [cut.cut(ds.system_prompt_len, cut.start(g))[0] for g in range(ds.groups)]
    items = []
    for g, system in enumerate(systems):
        for q in range(ds.prompts_per_group):
            question = cut.cut(ds.question_len, cut.start(ds.groups + g * ds.prompts_per_group + q))[0]
            items.append(Content(user(f"{system}\n\n{question}"), ds.output_len, None, f"g{g}"))
    random.Random(seed).shuffle(items)
    return cycle(items, n)


def multi_turn_set(ds: MultiTurnSet, cut: Cutter, n: int) -> list[Content]:
    """Session s, turn t: the conversation so far (user turns of turn_len tokens, assistant turns of output_len
    tokens of text), sessions one after another."""
    out: list[Content] = []
    s = 0
    while len(out) < n:
        history: Messages = []
        for t in range(ds.turns):
            base = (s * ds.turns + t) * 2
            history = [*history, {"role": "user", "content": cut.cut(ds.turn_len, cut.start(base))[0]}]
            out.append(Content(list(history), ds.output_len, None, f"s{s}"))
            history.append({"role": "assistant", "content": cut.cut(ds.output_len, cut.start(base + 1))[0]})
        s += 1
    return out[:n]


def cycle(items: list[Content], n: int) -> list[Content]:
    if not items:
        raise ManifestError("load.dataset: the dataset yields no request", hint="check the file and its filters")
    return [items[i % len(items)] for i in range(n)]


_DEEP = ("nested deeper than the JSON parser allows (Python's recursion limit)", "a dataset's records are flat "
         "objects of strings and numbers: fix or drop the offending value")


def _loads(text: str, invalid: str, deep: str) -> Any:
    """One JSON value; invalid JSON is a ManifestError ``invalid: <why>``, nesting too deep for the parser
    (``TooDeep``) one saying ``deep`` is nested too deep."""
    try:
        return loads(text, keep_surrogates=True)  # refused by utf8 / _encodes below, never sent mended
    except TooDeep:
        raise ManifestError(f"{deep} {_DEEP[0]}", hint=_DEEP[1]) from None
    except ValueError as exc:
        raise ManifestError(f"{invalid}: {exc}") from exc


def _records(text: str, what: str) -> Iterator[object]:
    """A JSON list, or JSONL (one value a line), bounded in lines and in each item's size; nesting too deep for
    the parser (``TooDeep``) is a ManifestError naming the file and the line."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        data = _loads(text, f"{what}: not valid JSON", f"{what}: the JSON list is")
        yield from data[:MAX_LINES]
        return
    for no, line in enumerate(text.splitlines(), 1):
        if no > MAX_LINES:
            raise ManifestError(f"{what}: over {MAX_LINES} lines")
        if not line.strip():
            continue
        if len(line) > MAX_ITEM_CHARS:
            raise ManifestError(f"{what}: line {no} is over {MAX_ITEM_CHARS >> 20} MiB")
        yield _loads(line, f"{what}: line {no} is not JSON", f"{what}: line {no} is")


def utf8(text: str, what: str) -> str:
    """``text`` when it encodes as UTF-8 (a JSON escape of a lone surrogate such as \\ud800 does not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ManifestError(f"{what}: a string is not valid Unicode ({exc.reason} at character {exc.start}: a "
                            "JSON escape of a lone surrogate such as \\ud800)",
                            hint="fix the text (a surrogate pair, or the character itself)") from None
    return text


def _encodes(texts: list[str]) -> bool:
    try:
        for t in texts:
            t.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _turns(rec: object) -> list[str]:
    if not isinstance(rec, dict):
        return []
    conv = rec.get("conversations", rec.get("conversation", []))
    if not isinstance(conv, list):
        return []
    return [t["value"] for t in conv if isinstance(t, dict) and isinstance(t.get("value"), str)]


def sharegpt_set(ds: ShareGptSet, text: str, counter: Counter, n: int, seed: int) -> list[Content]:
    """sglang's sample_sharegpt_requests: conversations with >= 2 turns, shuffled with ``seed``; prompt = the first
    turn, output length = the second's token count (or output_len); pruned when either is < 2 tokens or their sum
    exceeds context_len (or the completion is over MAX_TOKENS, the most any request asks)."""
    what = f"load.dataset (sharegpt) {ds.file.path}"
    # a conversation whose first two turns are not valid Unicode (a lone surrogate) is skipped, like one too short
    pairs = [(t[0], t[1]) for t in (_turns(r) for r in _records(text, what)) if len(t) >= 2 and _encodes(t[:2])]
    random.Random(seed).shuffle(pairs)
    out: list[Content] = []
    for prompt, completion in pairs:
        if len(out) == n:
            break
        p = len(counter.encode(prompt))
        o = ds.output_len if ds.output_len is not None else len(counter.encode(completion))
        if p < 2 or o < 2 or o > MAX_TOKENS or (ds.context_len and p + o > ds.context_len):
            continue
        out.append(Content(user(prompt), o, p))
    return cycle(out, n)


def jsonl_set(path: str, text: str, counter: Counter, n: int, output_tokens: int) -> list[Content]:
    what = f"load.dataset (jsonl) {path}"
    items = []
    for no, rec in enumerate(_records(text, what), 1):
        if not isinstance(rec, dict):
            raise ManifestError(f"{what}: item {no} is not an object")
        out = rec.get("output_tokens", output_tokens)
        if isinstance(out, bool) or not isinstance(out, int) or not 1 <= out <= MAX_TOKENS:
            raise ManifestError(f"{what}: item {no}: output_tokens must be an integer in 1..{MAX_TOKENS}")
        items.append(Content(_messages(rec, f"{what}: item {no}"), out))
    return cycle(items, n)


def _messages(rec: dict[str, object], what: str) -> Messages:
    if isinstance(rec.get("prompt"), str):
        return user(utf8(str(rec["prompt"]), what))
    msgs = rec.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise ManifestError(f"{what} has neither a 'prompt' string nor a non-empty 'messages' list")
    out: Messages = []
    for m in msgs:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise ManifestError(f"{what}: every message needs a string 'role' and 'content'")
        out.append({"role": utf8(m["role"], what), "content": utf8(m["content"], what)})
    return out


