"""Write a random-weight Qwen3-MoE model directory that ``transformers serve`` can load, from a named shape.

    python -m kit_hf.make_model tiny-cpu OUT_DIR [--seed 0] [--dtype float32] [--layers N] [--device cpu]

(``pip install -e images/transformers``, or ``images/transformers`` on ``PYTHONPATH``). No hub is needed: the config comes from the shape, the weights are seeded random numbers saved
with ``save_pretrained`` (safetensors), the tokenizer is built locally (``kit_hf.tokenizer``) with a
ChatML chat template, and ``kit-model.json`` records the arguments.

Deterministic: the same arguments, transformers, torch and device give the same bytes (every tensor is
filled from its own ``torch.Generator`` seeded from ``seed`` and the tensor's name, independent of
transformers' own initialisation). CPU and CUDA generators differ, so ``--device`` is part of the identity.

Shapes: ``tiny-cpu`` (vocab 2048, hidden 128, 4 layers, 16 experts top-4: a few MB, for CI) and
``qwen3-30b-a3b`` (Qwen3-30B-A3B's config: hidden 2048, 48 layers, 32 heads / 4 KV heads of 128, 128
experts top-8 with intermediate 768, vocab 151936; ``--layers`` cuts the depth, e.g. 8 layers ~ 11 GB bf16).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import Any

SHAPES: dict[str, dict[str, Any]] = {
    "tiny-cpu": {
        "vocab_size": 2048, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "num_experts": 16,
        "num_experts_per_tok": 4, "moe_intermediate_size": 64, "max_position_embeddings": 4096,
        "norm_topk_prob": True, "rms_norm_eps": 1e-6,
    },
    "qwen3-30b-a3b": {  # Qwen/Qwen3-30B-A3B config.json
        "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
        "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
        "num_experts_per_tok": 8, "moe_intermediate_size": 768, "max_position_embeddings": 40960,
        "norm_topk_prob": True, "rms_norm_eps": 1e-6,
    },
}
COMMON: dict[str, Any] = {
    "hidden_act": "silu", "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
    "attention_bias": False, "use_sliding_window": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "tie_word_embeddings": False, "initializer_range": 0.02,
}
DTYPES = ("float32", "bfloat16", "float16")
RECORD = "kit-model.json"
INIT_STD = 0.02


class ModelError(Exception):
    """A bad shape or argument (the CLI prints it and exits 2)."""


def model_config(shape: str, layers: int | None = None) -> dict[str, Any]:
    """The config kwargs of a named shape (``layers`` overrides the depth)."""
    if shape not in SHAPES:
        raise ModelError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    cfg = {**SHAPES[shape], **COMMON}
    if layers is not None:
        if not 1 <= layers <= SHAPES[shape]["num_hidden_layers"]:
            raise ModelError(f"--layers {layers}: the {shape} shape has 1..{SHAPES[shape]['num_hidden_layers']} layers")
        cfg["num_hidden_layers"] = layers
    return cfg


def tensor_seed(seed: int, name: str) -> int:
    """A 63-bit seed per tensor: the run's seed and the tensor's name, so order and sharding do not matter."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def fill_weights(model: Any, seed: int, silent: list[int]) -> None:
    """Norm weights 1; every other tensor N(0, INIT_STD) from its own generator; ``lm_head`` rows of the
    ``silent`` ids 0 (see ``kit_hf.tokenizer``)."""
    import torch

    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
                continue
            gen = torch.Generator(device=param.device).manual_seed(tensor_seed(seed, name))
            param.normal_(0.0, INIT_STD, generator=gen)
        head = model.get_output_embeddings().weight
        head[torch.tensor(silent, dtype=torch.long, device=head.device)] = 0.0


def build_model(shape: str, *, seed: int, dtype: str, device: str, layers: int | None) -> Any:
    """The model, filled, on ``device`` (built on the meta device first: nothing is initialised twice)."""
    import torch
    from transformers import GenerationConfig, Qwen3MoeConfig, Qwen3MoeForCausalLM

    from kit_hf import tokenizer

    cfg = model_config(shape, layers)
    size = cfg["vocab_size"]
    ids = {s: size - len(tokenizer.SPECIALS) + i for i, s in enumerate(tokenizer.SPECIALS)}
    config = Qwen3MoeConfig(**cfg, bos_token_id=ids[tokenizer.BOS], eos_token_id=ids[tokenizer.EOS],
                            pad_token_id=ids[tokenizer.PAD], dtype=dtype)
    torch_dtype = getattr(torch, dtype)
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(config)
    model = model.to_empty(device=device).to(torch_dtype)
    fill_weights(model, seed, tokenizer.silent_ids(size))
    model.generation_config = GenerationConfig(
        do_sample=False, bos_token_id=ids[tokenizer.BOS], eos_token_id=ids[tokenizer.EOS],
        pad_token_id=ids[tokenizer.PAD])
    return model


def save_tokenizer(out: Path, size: int) -> None:
    from transformers import PreTrainedTokenizerFast

    from kit_hf import tokenizer

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.build(size), bos_token=tokenizer.BOS, eos_token=tokenizer.EOS,
        pad_token=tokenizer.PAD, unk_token=None, chat_template=tokenizer.CHAT_TEMPLATE,
        model_max_length=1 << 20, clean_up_tokenization_spaces=False)
    fast.save_pretrained(str(out))


def sha256_tree(root: Path) -> tuple[str, dict[str, str]]:
    """(sha256 over the "path\\0digest\\n" lines sorted by path, {relative path: sha256}) of every file under
    root: the digest kit records for ``model.path`` when the manifest sets ``model.digest``."""
    files: dict[str, str] = {}
    for path in (p for p in root.rglob("*") if p.is_file()):
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        files[path.relative_to(root).as_posix()] = h.hexdigest()
    ordered = sorted(files.items())
    tree = hashlib.sha256("".join(f"{p}\0{d}\n" for p, d in ordered).encode()).hexdigest()
    return tree, dict(ordered)


def make_model(shape: str, out: Path, *, seed: int = 0, dtype: str = "float32", device: str = "cpu",
               layers: int | None = None, force: bool = False) -> dict[str, Any]:
    """Write the model directory; return its record (also written to ``out/kit-model.json``).

    An existing directory with the same record is kept as it is (nothing is rebuilt, nothing is checked: see
    ``sha256_tree``); one with another record (or none) is an error unless ``force``, which replaces it."""
    if dtype not in DTYPES:
        raise ModelError(f"--dtype {dtype!r}: expected one of {', '.join(DTYPES)}")
    import torch
    import transformers

    cfg = model_config(shape, layers)
    record: dict[str, Any] = {
        "kit_model": 1, "shape": shape, "layers": cfg["num_hidden_layers"], "seed": seed, "dtype": dtype,
        "device": torch.device(device).type, "transformers": transformers.__version__,
        "torch": torch.__version__.split("+")[0],
    }
    if out.exists():
        old = _read_record(out)
        if old == record:
            return record
        if not force:
            raise ModelError(f"{out} exists and was made with other arguments ({old or 'no ' + RECORD}); "
                             "remove it or pass --force")
        shutil.rmtree(out)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model = build_model(shape, seed=seed, dtype=dtype, device=device, layers=layers)
    model.save_pretrained(str(tmp), safe_serialization=True, max_shard_size="4GB")
    del model
    save_tokenizer(tmp, cfg["vocab_size"])
    (tmp / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    for f in tmp.rglob("*"):  # readable by a container's unprivileged user (safetensors writes 0600)
        f.chmod(0o755 if f.is_dir() else 0o644)
    tmp.chmod(0o755)
    tmp.rename(out)
    return record


def _read_record(out: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((out / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kit_hf.make_model", description=__doc__.split("\n\n")[0])
    p.add_argument("shape", choices=sorted(SHAPES))
    p.add_argument("out", type=Path, help="the model directory to write")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="float32", choices=DTYPES)
    p.add_argument("--device", default="cpu", help="where the weights are generated: cpu or cuda (default cpu)")
    p.add_argument("--layers", type=int, default=None, help="override the shape's number of layers")
    p.add_argument("--force", action="store_true", help="replace an existing directory made with other arguments")
    p.add_argument("--print-digest", action="store_true", help="print the sha256 tree digest of the directory")
    args = p.parse_args(argv)
    try:
        record = make_model(args.shape, args.out, seed=args.seed, dtype=args.dtype, device=args.device,
                            layers=args.layers, force=args.force)
    except ModelError as e:
        print(f"make_model: {e}", file=sys.stderr)
        return 2
    line = f"{args.out}: {record['shape']}, {record['layers']} layers, {record['dtype']}, seed {record['seed']}"
    if args.print_digest:
        line += f", sha256 tree {sha256_tree(args.out)[0]}"
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
