"""Run the patched ``forward_context.py`` of an extracted sglang tree, without the rest of sglang.

Usage: ``python fc_probe.py SITE_DIR``; prints JSON. The parent packages are stubbed with only a
``__path__`` so that importing ``sglang.srt.model_executor.forward_context`` executes exactly two real
sglang files: ``sglang/srt/environ.py`` and ``forward_context.py``. Run it in a fresh interpreter: the
patch reads ``SGLANG_OEA_K0`` once at import.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import types


class Mode:
    def __init__(self, decode: bool) -> None:
        self.decode = decode

    def is_decode(self) -> bool:
        return self.decode


class Batch:
    def __init__(self, decode: bool) -> None:
        self.forward_mode = Mode(decode)
        self.moe_num_token_non_padded = None


def main(root: str) -> dict[str, object]:
    for name in ("sglang", "sglang.srt", "sglang.srt.model_executor"):
        stub = types.ModuleType(name)
        stub.__path__ = [f"{root}/{name.replace('.', '/')}"]
        sys.modules[name] = stub
    fc = importlib.import_module("sglang.srt.model_executor.forward_context")
    from sglang.srt.environ import envs

    out: dict[str, object] = {"knob": envs.SGLANG_OEA_K0.get()}
    out["fields"] = [f.name for f in dataclasses.fields(fc.ForwardContext)]
    ctx = fc.ForwardContext(attn_backend="backend")

    def flag() -> bool:
        return bool(fc.get_forward_context().oea_active)

    with fc.forward_context(ctx, forward_batch=Batch(decode=True)):
        out["decode"] = flag()
        with fc.forward_context(fc.ForwardContext(attn_backend="pdmux")):
            out["decode_nested_fresh"] = flag()
        with fc.forward_context(dataclasses.replace(fc.get_forward_context(), attn_backend="tbo")):
            out["decode_nested_replace"] = flag()
        with fc.forward_context(ctx, forward_batch=Batch(decode=False)):
            out["decode_then_extend_batch"] = flag()
    with fc.forward_context(ctx, forward_batch=Batch(decode=False)):
        out["extend"] = flag()
        with fc.forward_context(fc.ForwardContext(attn_backend="pdmux")):
            out["extend_nested_fresh"] = flag()
    with fc.forward_context(ctx):
        out["no_batch"] = flag()
    out["restored"] = not fc.has_forward_context()
    return out


if __name__ == "__main__":
    sys.stdout.write(json.dumps(main(sys.argv[1])))
