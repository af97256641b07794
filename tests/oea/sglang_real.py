"""Cross-check of sglang_args.py against sglang's own parser builder, run in its own interpreter by
test_sglang_flags.py: ``add_cli_args_from_dataclass`` (sglang/srt/arg_groups/arg_utils.py) over the real namespace
classes of the wheel, with only the helpers their modules import and the parser never calls stubbed
(``sglang.srt.utils`` and ``sglang.srt.lora.lora_registry``, which pull in orjson, torch and the rest). Needs
msgspec (sglang's dependency). Prints JSON: the options argparse registered, and where the AST parse differs.

usage: python sglang_args_xcheck.py SITE_DIR WHEEL
"""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
import types
from pathlib import Path
from typing import Any

site, wheel, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
sys.path[:0] = [str(site), str(Path(__file__).parent), str(Path(__file__).parents[2] / "images" / "oea")]


class _Stub(types.ModuleType):
    """Any attribute: an upper-case name is an empty list (a constant), anything else a no-op class."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return [] if name.isupper() else type(name, (), {"__init__": lambda self, *a, **k: None})


for pkg in ("sglang", "sglang.srt", "sglang.srt.model_executor"):
    mod = types.ModuleType(pkg)
    mod.__path__ = [str(site.joinpath(*pkg.split(".")))]
    sys.modules[pkg] = mod
for stub in ("sglang.srt.utils", "sglang.srt.utils.common", "sglang.srt.lora.lora_registry"):
    sys.modules[stub] = _Stub(stub)
    sys.modules[stub].__path__ = []  # type: ignore[attr-defined]

from sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass  # noqa: E402
from sglang_args import SERVER_ARGS, _namespace_classes, options_from_wheel  # noqa: E402

parser = argparse.ArgumentParser(add_help=False)
classes = [getattr(importlib.import_module(module[:-3].replace("/", ".")), cls)
           for cls, module in _namespace_classes(ast.parse((site / SERVER_ARGS).read_text())).items()]
for cls in classes:
    add_cli_args_from_dataclass(parser, cls)


def guard(k0: int, argv: list[str]) -> dict[str, Any]:
    import msgspec.structs
    from sglang.srt import runtime_context as rc

    args = parser.parse_args(argv)
    bags: dict[str, Any] = {}
    for cls in classes:
        *parents, leaf_ns = cls._NS_PATH.split(".")
        top = bags.setdefault(cls._NS_PATH.split(".")[0], rc._ConfigBag(cls._NS_PATH.split(".")[0]))
        bag = top
        if parents:
            bag = rc._ConfigBag(cls._NS_PATH)
            top._set_sub(leaf_ns, bag)
        for f in msgspec.structs.fields(cls):
            bag._set(f.name, getattr(args, f.name, f.default))
    ctx = rc.get_context()
    ctx._config_bags = bags
    ctx.parallel._config = bags["parallel"]
    from kit_oea.guard import OeaSetupError, refuse_unsupported_setup, setup_from_sglang

    try:
        refuse_unsupported_setup(k0)
    except OeaSetupError as e:
        return {"refused": str(e), "setup": vars(setup_from_sglang())}
    return {"refused": None, "setup": vars(setup_from_sglang())}


if mode == "guard":
    json.dump([guard(int(sys.argv[4]), argv) for argv in json.loads(sys.argv[5])], sys.stdout)
    sys.exit(0)
real: dict[str, tuple[str, list[str] | None]] = {}
for action in parser._actions:
    values = "none" if action.nargs == 0 else "many" if action.nargs in ("+", "*") else "one"
    choices = None if action.choices is None else sorted(map(str, action.choices))
    for name in action.option_strings:
        real[name] = (values, choices)
ours = {name: (o.values, None if o.choices is None else sorted(o.choices))
        for name, o in options_from_wheel(wheel).items() if o.source != SERVER_ARGS}
json.dump({
    "real": len(real),
    "only_real": sorted(set(real) - set(ours)),
    "only_ours": sorted(set(ours) - set(real)),
    # ours may leave choices unchecked (None) where sglang computes them; any other difference is a bug
    "differ": {k: [real[k], ours[k]] for k in sorted(set(real) & set(ours))
               if real[k] != ours[k] and not (ours[k][1] is None and real[k][0] == ours[k][0])},
    "unchecked_choices": sorted(k for k in set(real) & set(ours) if ours[k][1] is None and real[k][1] is not None),
}, sys.stdout)
