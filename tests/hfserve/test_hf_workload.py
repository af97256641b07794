"""Token-exact prompts with a real byte-level BPE tokenizer (the one kit_hf builds for its models, saved as
transformers saves it), counted independently here: the content by the Rust `tokenizers` library on its own
tokenizer.json, the templated chat prompt by rendering the ChatML template by hand and encoding that string."""

from __future__ import annotations

from pathlib import Path

import pytest
from hf_helpers import IMAGE_DIR  # noqa: F401 - puts kit_hf on sys.path

from kit.manifest.load import Load
from kit.workload import Workload
from kit.workload.sources import random_lengths

pytestmark = pytest.mark.slow  # transformers' import: ~3 s


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from kit_hf.make_model import save_tokenizer

    out = tmp_path_factory.mktemp("tok")
    save_tokenizer(out, 2048)
    return out


def chatml(content: str) -> str:
    return f"<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_random_prompts_are_token_exact_by_an_independent_count(tokenizer_dir: Path, endpoint: str) -> None:
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    load = Load.model_validate({"levels": [1], "endpoint": endpoint, "tokenizer": str(tokenizer_dir), "seed": 1,
                                "dataset": {"kind": "random", "input_len": 300, "output_len": 8, "range_ratio": 0.0}})
    wl = Workload(load, None)
    items = wl.level(60, seed=4)
    lengths, _ = random_lengths(load.dataset, 60, 4)  # type: ignore[arg-type]
    for it, n in zip(items, lengths, strict=True):
        text = it.messages[0].content if it.messages else it.prompt
        assert text is not None
        assert len(raw.encode(text, add_special_tokens=False).ids) == n == it.content_tokens
        want = len(raw.encode(chatml(text)).ids) if endpoint == "chat" else len(raw.encode(text).ids)
        assert it.prompt_tokens == want
    if endpoint == "chat":
        assert wl.index({}).template_overhead == len(raw.encode(chatml("hello")).ids) - len(raw.encode("hello").ids)
