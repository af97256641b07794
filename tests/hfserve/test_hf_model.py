"""kit_hf.make_model: the same arguments give the same bytes, and the model and tokenizer keep the promise
kit's token counting relies on (every id the model can emit streams as one non-empty content chunk)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="transformers is not installed (make test installs it)")
torch = pytest.importorskip("torch")

from kit_hf import tokenizer  # noqa: E402
from kit_hf.make_model import ModelError, make_model, model_config, sha256_tree  # noqa: E402
from tokenizers.decoders import DecodeStream  # noqa: E402


@pytest.mark.slow  # seconds of subprocesses or plots: the slow tier (unit tier budget, issue 21)
def test_same_arguments_same_bytes(tiny_model: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    make_model("tiny-cpu", again, seed=0)
    first, files = sha256_tree(tiny_model)
    assert sha256_tree(again) == (first, files)
    assert {"config.json", "model.safetensors", "tokenizer.json", "kit-model.json"} <= set(files)
    other = tmp_path / "seed1"
    make_model("tiny-cpu", other, seed=1)
    other_files = sha256_tree(other)[1]
    assert other_files["model.safetensors"] != files["model.safetensors"]
    assert other_files["tokenizer.json"] == files["tokenizer.json"]


def test_an_existing_directory_is_kept_or_refused(tiny_model: Path) -> None:
    before = sha256_tree(tiny_model)
    assert make_model("tiny-cpu", tiny_model, seed=0)["seed"] == 0  # same record: kept as it is
    assert sha256_tree(tiny_model) == before
    with pytest.raises(ModelError, match="other arguments"):
        make_model("tiny-cpu", tiny_model, seed=5)
    with pytest.raises(ModelError, match="unknown shape"):
        model_config("tiny")
    with pytest.raises(ModelError, match=r"1\.\.4 layers"):
        model_config("tiny-cpu", layers=9)


def test_qwen3_30b_a3b_shape_is_the_real_config() -> None:
    cfg = model_config("qwen3-30b-a3b", layers=8)
    assert (cfg["hidden_size"], cfg["num_experts"], cfg["num_experts_per_tok"], cfg["moe_intermediate_size"],
            cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], cfg["vocab_size"],
            cfg["num_hidden_layers"]) == (2048, 128, 8, 768, 32, 4, 128, 151936, 8)
    assert tokenizer.build(151936).get_vocab_size() == 151936


def test_every_emittable_id_streams_as_one_alphanumeric_chunk(tiny_model: Path) -> None:
    """What transformers serve's streamer does per generated token (DecodeStream.step, specials kept because
    the Qwen3 response parser is on): each id that is not silent gives non-empty [a-z0-9A-Z] text, so the
    parser passes it through as one content event; each silent id has an all-zero lm_head row."""
    from safetensors import safe_open

    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_model))._tokenizer
    size = json.loads((tiny_model / "config.json").read_text())["vocab_size"]
    assert tok.get_vocab_size(with_added_tokens=True) == size
    silent = set(tokenizer.silent_ids(size))
    stream = DecodeStream([], skip_special_tokens=False)
    for i in range(size):
        if i not in silent:
            text = stream.step(tok, i)
            assert text and text.isascii() and text.isalnum(), (i, text)
    with safe_open(str(tiny_model / "model.safetensors"), "pt") as f:
        head = f.get_tensor("lm_head.weight")
    zero = (head == 0).all(dim=1)
    assert sorted(torch.nonzero(zero).flatten().tolist()) == sorted(silent)


def test_chat_template_ends_with_the_generation_prompt(tiny_model: Path) -> None:
    tok = transformers.AutoTokenizer.from_pretrained(str(tiny_model))
    text = tok.apply_chat_template([{"role": "user", "content": "q1 the river"}], tokenize=False,
                                   add_generation_prompt=True)
    assert text == "<|im_start|>user\nq1 the river<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(text)["input_ids"]
    assert tok.decode(ids) == text  # byte-level: the newlines survive the round trip


def test_kit_and_the_maker_agree_on_the_tree_digest_and_sha256sum_on_every_file(tiny_model: Path,
                                                                                 tmp_path: Path) -> None:
    """kit.plumbing.treedigest (what a run records for model.path) against kit_hf's own digest and against
    coreutils' sha256sum per file; a symlinked copy (a Hugging Face cache snapshot is one) digests the same."""
    import hashlib
    import shutil
    import subprocess

    from kit.plumbing.treedigest import tree_digest

    if shutil.which("sha256sum") is None:
        pytest.skip("coreutils sha256sum is not installed")
    got = tree_digest(tiny_model)
    assert got.digest == sha256_tree(tiny_model)[0]
    names = sorted(got.files)
    out = subprocess.run(["sha256sum", "--", *names], cwd=tiny_model, capture_output=True, text=True, check=True)
    reference = {line[66:]: line[:64] for line in out.stdout.splitlines()}
    assert reference == got.files
    lines = "".join(f"{n}\0{reference[n]}\n" for n in names)
    assert got.digest == hashlib.sha256(lines.encode()).hexdigest()
    links = tmp_path / "snapshot"
    links.mkdir()
    for n in names:
        (links / n).symlink_to(tiny_model / n)
    assert tree_digest(links).digest == got.digest
