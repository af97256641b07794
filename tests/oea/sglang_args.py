"""sglang 0.5.23's command-line options, read from the wheel's own source (never a list typed here).

sglang 0.5.23 declares almost every server flag as an annotated field of a namespace class under
``sglang/srt/arg_groups/fields/`` (``A[T, "help"]`` or ``A[T, Arg(cli_name=..., aliases=..., choices=...)]``);
``ServerArgs.add_cli_args`` turns the classes listed in ``server_args._INPUT_NAMESPACES`` into argparse options
(``arg_groups/arg_utils.add_cli_args_from_dataclass``: ``--`` + the field name with ``-`` for ``_``, unless
``cli_name``; ``no_cli=True`` fields get none) and registers the rest with plain ``parser.add_argument`` calls
(dynamic choices, deprecated spellings, ``--config``). Both are parsed here with ``ast``, the way
add_cli_args_from_dataclass reads them: bool fields are store_true (take no value), ``Literal[...]`` gives the
choices, ``List[...]`` takes one or more values. Importing sglang itself needs its CUDA-era dependencies (orjson,
msgspec, ...), which is why the source is parsed rather than the parser built.
"""

from __future__ import annotations

import ast
import zipfile
from dataclasses import dataclass
from pathlib import Path

SERVER_ARGS = "sglang/srt/server_args.py"
CHOICES = "sglang/srt/arg_groups/choices.py"
FIELDS_PACKAGE = "sglang.srt.arg_groups.fields."


@dataclass(frozen=True)
class Option:
    """One command-line option: its field, its spellings, whether it takes values, and its choices if fixed."""

    field: str
    names: tuple[str, ...]
    values: str  # "none" (a switch), "one", "many" (nargs +)
    choices: tuple[str, ...] | None
    source: str  # file in the wheel


def _read(zf: zipfile.ZipFile, name: str) -> ast.Module:
    return ast.parse(zf.read(name).decode("utf-8"), filename=name)


def _constants(node: ast.AST, names: dict[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    """A list/tuple/set of string constants, or a module-level name bound to one; None when not literal."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        out = [str(e.value) for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, (str, int))]
        return tuple(out) if len(out) == len(node.elts) else None
    return None


def _literal_lists(tree: ast.Module) -> dict[str, tuple[str, ...]]:
    out: dict[str, tuple[str, ...]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values = _constants(node.value, out)
            if values is not None:
                out[node.targets[0].id] = values
    return out


def _unwrap_optional(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Optional":
        return node.slice
    return node


def _type_values(node: ast.expr) -> tuple[str, tuple[str, ...] | None]:
    """(how many values, Literal choices) for a field type, as add_cli_args_from_dataclass decides them."""
    inner = _unwrap_optional(node)
    if isinstance(inner, ast.Name) and inner.id == "bool":
        return "none", None
    if isinstance(inner, ast.Subscript) and isinstance(inner.value, ast.Name):
        if inner.value.id == "Literal":
            elts = inner.slice.elts if isinstance(inner.slice, ast.Tuple) else [inner.slice]
            vals = tuple(str(e.value) for e in elts if isinstance(e, ast.Constant))
            return "one", vals
        if inner.value.id in ("List", "list"):
            return "many", None
    return "one", None


def _field_option(item: ast.AnnAssign, names: dict[str, tuple[str, ...]], source: str) -> Option | None:
    ann = item.annotation
    if not (isinstance(item.target, ast.Name) and isinstance(ann, ast.Subscript)
            and isinstance(ann.value, ast.Name) and ann.value.id == "A" and isinstance(ann.slice, ast.Tuple)):
        return None
    type_node, meta = ann.slice.elts[0], ann.slice.elts[1]
    field = item.target.id
    values, choices = _type_values(type_node)
    cli = "--" + field.replace("_", "-")
    aliases: tuple[str, ...] = ()
    if isinstance(meta, ast.Call) and isinstance(meta.func, ast.Name) and meta.func.id == "Arg":
        kw = {k.arg: k.value for k in meta.keywords if k.arg}
        if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:  # type: ignore[union-attr]
            return None
        if isinstance(kw.get("cli_name"), ast.Constant):
            cli = str(kw["cli_name"].value)  # type: ignore[union-attr]
        if "aliases" in kw:
            aliases = _constants(kw["aliases"], names) or ()
        if "choices" in kw:
            choices = _constants(kw["choices"], names)  # None: computed, not checked
        if "nargs" in kw and isinstance(kw["nargs"], ast.Constant) and kw["nargs"].value in ("+", "*"):
            values = "many"
        if "type_parser" in kw and values == "many":
            values = "one"  # the parser takes the whole value as one string (json_list_type)
        action = kw.get("action")
        if isinstance(action, ast.Attribute) and action.attr == "BooleanOptionalAction":
            aliases = (*aliases, "--no-" + cli[2:])  # argparse adds the negative spelling
        extra = kw.get("action_kwargs")
        if isinstance(extra, ast.Dict):
            for k, v in zip(extra.keys, extra.values, strict=True):
                if isinstance(k, ast.Constant) and k.value == "nargs" and isinstance(v, ast.Constant):
                    values = "many" if v.value in ("+", "*") else values
    elif not (isinstance(meta, ast.Constant) and isinstance(meta.value, str)):
        return None
    return Option(field, (cli, *aliases), values, choices, source)


def _namespace_classes(server_args: ast.Module) -> dict[str, str]:
    """Class name -> module path in the wheel, for every class in ``_INPUT_NAMESPACES``."""
    modules: dict[str, str] = {}
    listed: list[str] = []
    for node in server_args.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(FIELDS_PACKAGE):
            for alias in node.names:
                modules[alias.asname or alias.name] = node.module.replace(".", "/") + ".py"
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "_INPUT_NAMESPACES" and isinstance(node.value, ast.List)):
            listed = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
    if not listed:
        raise AssertionError(f"{SERVER_ARGS}: no _INPUT_NAMESPACES list; sglang's argument layout changed")
    return {name: modules[name] for name in listed}


def _add_argument_options(server_args: ast.Module, names: dict[str, tuple[str, ...]]) -> list[Option]:
    """``parser.add_argument("--x", ...)`` calls inside ``ServerArgs.add_cli_args``."""
    out = []
    for node in ast.walk(server_args):
        if not (isinstance(node, ast.FunctionDef) and node.name == "add_cli_args"):
            continue
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "add_argument"):
                continue
            flags = tuple(a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            action = kw.get("action")
            switch = (isinstance(action, ast.Constant) and action.value in ("store_true", "store_false")) or (
                isinstance(action, ast.Name) and action.id == "DeprecatedStoreTrueAction")
            choices = _constants(kw["choices"], names) if "choices" in kw else None
            dest = flags[0].lstrip("-").replace("-", "_")
            out.append(Option(dest, flags, "none" if switch else "one", choices, SERVER_ARGS))
    return out


def options_from_wheel(wheel: Path) -> dict[str, Option]:
    """Every option string sglang's server accepts, mapped to its Option (aliases included)."""
    with zipfile.ZipFile(wheel) as zf:
        server_args = _read(zf, SERVER_ARGS)
        names = _literal_lists(_read(zf, CHOICES))
        options = _add_argument_options(server_args, names)
        for cls_name, module in _namespace_classes(server_args).items():
            tree = _read(zf, module)
            local = {**names, **_literal_lists(tree)}
            cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls_name), None)
            if cls is None:
                raise AssertionError(f"{module}: no class {cls_name}")
            for item in cls.body:
                if isinstance(item, ast.AnnAssign):
                    opt = _field_option(item, local, module)
                    if opt is not None:
                        options.append(opt)
    by_name: dict[str, Option] = {}
    for opt in options:
        for name in opt.names:
            by_name[name] = opt
    return by_name


def sglang_argv(command: list[str]) -> list[str]:
    """The arguments after ``-m sglang.launch_server`` (or ``sglang serve``) in a server command."""
    for i, token in enumerate(command):
        if token == "sglang.launch_server" or (token == "serve" and i and command[i - 1].endswith("sglang")):
            return command[i + 1:]
    raise AssertionError(f"not an sglang server command: {command}")


def check_argv(argv: list[str], options: dict[str, Option]) -> list[str]:
    """Problems with ``argv`` as sglang 0.5.23's parser sees it: unknown or abbreviated flags, a value where a
    switch takes none, a missing value, a value outside a flag's fixed choices. Placeholders ({port}) pass."""
    problems = []
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--"):
            problems.append(f"{token!r} is not a flag and follows no flag that takes a value")
            continue
        flag, eq, inline = token.partition("=")
        opt = options.get(flag)
        if opt is None:
            near = sorted(n for n in options if n.startswith(flag))
            hint = f" (an abbreviation of {', '.join(near[:4])}: spell it out)" if near else ""
            problems.append(f"{flag}: not an option of sglang 0.5.23{hint}")
            while not eq and i < len(argv) and not argv[i].startswith("--"):
                i += 1  # its values, whatever they were meant to be
            continue
        if opt.values == "none":
            if eq:
                problems.append(f"{flag} is a switch and takes no value (got {inline!r})")
            continue
        values = [inline] if eq else []
        while not eq and i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
            if opt.values == "one":
                break
        if not values:
            problems.append(f"{flag} needs a value")
        for v in values:
            if opt.choices is not None and "{" not in v and v not in opt.choices:
                problems.append(f"{flag} {v}: not one of sglang 0.5.23's choices {list(opt.choices)}")
    return problems
