"""A byte-level BPE tokenizer built locally (no hub), and the ids a random-weight model must never emit.

Why byte-level: ``transformers serve`` renders the chat template and tokenizes the text; a WordLevel
tokenizer drops the newline in ``<|im_start|>assistant\\n`` and the server then streams the prompt back.

Why a constructed vocabulary instead of a trained one: it must have exactly the model's vocabulary size
(151,936 for Qwen3-30B-A3B) so that every id the model can emit decodes, and it must be the same bytes
every time. The vocabulary is, in id order: the 256 byte symbols (GPT-2's byte-to-unicode order), then
every 2-character and then 3-character string over ``[a-z0-9A-Z]`` (in that order) (each built by one merge of its prefix
and its last character) until the model's vocabulary less the specials is full, then the specials
``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` as the last ids.

Counting tokens: the server streams one content event per generated token only when each token decodes, on
its own, to non-empty text that the Qwen3 response parser passes straight through (it holds back
whitespace and anything that could open ``<think>`` or ``<tool_call>``). ``silent_ids`` lists every id that
is not purely alphanumeric (byte symbols other than ``[0-9A-Za-z]``, and the specials): the model maker
zeroes their ``lm_head`` rows, so their logit is exactly 0 and greedy decoding never picks them while any
other logit is positive (with thousands of random logits, always).
"""

from __future__ import annotations

import itertools
import string

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

ALNUM = string.ascii_lowercase + string.digits + string.ascii_uppercase
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
BOS, EOS, PAD = "<|endoftext|>", "<|im_end|>", "<|endoftext|>"
MIN_VOCAB = 256 + len(ALNUM) ** 2 // 8 + len(SPECIALS)  # enough 2-character tokens to be a real BPE
MAX_VOCAB = 256 + len(ALNUM) ** 2 + len(ALNUM) ** 3 + len(SPECIALS)

# Qwen-style ChatML. Jinja keeps the literal newlines; the generation prompt ends with "assistant\n".
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


def byte_symbols() -> list[str]:
    """GPT-2's byte-to-unicode table as a list indexed by byte value."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    out: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in out:
            out[b] = chr(256 + extra)
            extra += 1
    return [out[b] for b in range(256)]


def vocabulary(size: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """The BPE vocabulary (token -> id, specials excluded) and merges for a tokenizer of ``size`` ids."""
    if not MIN_VOCAB <= size <= MAX_VOCAB:
        raise ValueError(f"vocabulary size {size} is outside [{MIN_VOCAB}, {MAX_VOCAB}]")
    room = size - len(SPECIALS)
    vocab = {sym: i for i, sym in enumerate(byte_symbols())}
    merges: list[tuple[str, str]] = []
    words = itertools.chain(
        ("".join(p) for p in itertools.product(ALNUM, repeat=2)),
        ("".join(p) for p in itertools.product(ALNUM, repeat=3)),
    )
    for word in words:
        if len(vocab) >= room:
            break
        vocab[word] = len(vocab)
        merges.append((word[:-1], word[-1]))
    return vocab, merges


def build(size: int) -> Tokenizer:
    """The tokenizer with exactly ``size`` ids (the specials last)."""
    vocab, merges = vocabulary(size)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIALS])
    if tok.get_vocab_size(with_added_tokens=True) != size:
        raise AssertionError(f"tokenizer has {tok.get_vocab_size(with_added_tokens=True)} ids, expected {size}")
    return tok


def special_ids(tok: Tokenizer) -> dict[str, int]:
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    missing = [s for s, i in ids.items() if i is None]
    if missing:
        raise AssertionError(f"special tokens missing from the tokenizer: {missing}")
    return {s: int(i) for s, i in ids.items() if i is not None}


def silent_ids(size: int) -> list[int]:
    """Ids the model must never emit: anything that is not an alphanumeric string (see the module doc)."""
    symbols = byte_symbols()
    return [b for b in range(256) if symbols[b] not in ALNUM] + list(range(size - len(SPECIALS), size))
