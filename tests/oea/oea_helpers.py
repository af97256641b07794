"""Helpers for the OEA image tests: paths, apply.py as a module, the real sglang 0.5.23 sources."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
IMAGE_DIR = ROOT / "images" / "oea"
APPLY = IMAGE_DIR / "apply.py"
SGLANG_VERSION = "0.5.23"
WHEEL_CACHE = Path(os.environ.get("KIT_TEST_CACHE", Path.home() / ".cache" / "kit-test"))
# What apply.py reads or patches, plus the metadata that carries the version.
TREE_FILES = (
    "sglang/_version.py",
    "sglang/srt/environ.py",
    "sglang/srt/model_executor/forward_context.py",
    "sglang/srt/layers/moe/topk.py",
    "sglang/srt/entrypoints/http_server.py",
    f"sglang-{SGLANG_VERSION}.dist-info/METADATA",
)
TOPK = "sglang/srt/layers/moe/topk.py"
CONTEXT = "sglang/srt/model_executor/forward_context.py"
ENVIRON = "sglang/srt/environ.py"
HTTP_SERVER = "sglang/srt/entrypoints/http_server.py"

if str(IMAGE_DIR) not in sys.path:
    sys.path.insert(0, str(IMAGE_DIR))


def load_apply() -> ModuleType:
    """A fresh copy of images/oea/apply.py as a module (tests may monkeypatch its tables)."""
    spec = importlib.util.spec_from_file_location("kit_oea_apply", APPLY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def find_wheel() -> Path | None:
    wheels = sorted(WHEEL_CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    return wheels[0] if wheels else None


def download_wheel() -> tuple[Path | None, str]:
    """(the cached or freshly downloaded wheel or None, pip's complaint)."""
    wheel = find_wheel()
    if wheel is not None:
        return wheel, ""
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", f"sglang=={SGLANG_VERSION}"]
    proc = subprocess.run([*cmd, "-d", str(WHEEL_CACHE)], capture_output=True, text=True, check=False, timeout=600)
    return find_wheel(), proc.stderr.strip()[-500:]


def extract_tree(wheel: Path, dest: Path) -> Path:
    """The files of TREE_FILES from ``wheel`` under ``dest`` (a site-packages-like directory)."""
    with zipfile.ZipFile(wheel) as zf:
        for name in TREE_FILES:
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(zf.read(name))
    return dest


SGLANG_REAL = Path(__file__).with_name("sglang_real.py")


def need_msgspec() -> None:
    """Skip unless msgspec (sglang's dependency, needed to import its argument modules) is importable."""
    import importlib.util

    import pytest

    if importlib.util.find_spec("msgspec") is None:
        pytest.skip("msgspec (sglang's dependency) is not installed: `pip install msgspec` to run sglang's own "
                    "argument modules (sglang_real.py)")


def extract_arg_sources(wheel: Path, dest: Path) -> Path:
    """What sglang_real.py imports from the wheel: the argument groups, server_args, environ, runtime_context."""
    wanted = ("sglang/srt/server_args.py", "sglang/srt/runtime_context.py", "sglang/srt/environ.py",
              "sglang/srt/model_executor/cuda_graph_config.py")
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith("sglang/srt/arg_groups/") or name in wanted:
                zf.extract(name, dest)
    return dest


def run_apply(
    *args: str | Path, env: dict[str, str] | None = None, python: str = sys.executable
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, str(APPLY), *map(str, args)], capture_output=True, text=True, check=False, timeout=300, env=env
    )


def reference(
    rank: np.ndarray,
    scores: np.ndarray,
    k: int,
    k0: int,
    valid: np.ndarray,
    *,
    renormalize: bool = True,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """OEA written out plainly (rank by ``rank``, weigh by ``scores``): the spec the hook must meet."""
    b, n = rank.shape
    order = [sorted(range(n), key=lambda e, r=rank[i]: (-float(r[e]), e)) for i in range(b)]
    active = {e for i in range(b) if valid[i] for e in order[i][:k0]}
    ids = np.full((b, k), -1, dtype=np.int64)
    weights = np.zeros((b, k), dtype=np.float64)
    for i in range(b):
        if not valid[i]:
            continue
        chosen = [e for e in order[i] if e in active][:k]
        ids[i] = chosen + [order[i][0]] * (k - len(chosen))
        w = np.array([float(scores[i, e]) for e in chosen])
        if renormalize and w.sum() > 0:
            w = w / w.sum()
        weights[i, : len(chosen)] = w * (1.0 if scale is None else scale)
    return ids, weights


def patch_triton_interpreter_scalars() -> None:
    """Triton 3.6's interpreter turns a scalar kernel argument into a 1-element 1-D array and takes
    ``int(array)`` for ``range(0, M, ...)``, which NumPy 2.4 refuses (only 0-d arrays convert). Patched here,
    in the tests that interpret kernels on the CPU, to read the one element; compiled kernels are untouched."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor
    if getattr(original, "_kit_scalar_fix", False):
        return

    def patched(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patched._kit_scalar_fix = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patched


def patch_triton_interpreter_repatching() -> None:
    """Triton 3.6's interpreter patches triton.language for the interpreter (``_patch_lang``: inspect.getmembers
    over tl, tl.core, tl.tensor, tl.math) at each launch and again at every call of a @triton.jit helper inside
    the kernel, though within one launch the modules are already patched, with the same builder: a third of an
    interpreted test's time here (cProfile of the slowest: 83,401 such calls, 12 of its 37 s). Patched here, in
    the tests that interpret kernels on the CPU: inside a launch, a helper's call whose modules the launch has
    already patched patches nothing; the launch's own patch and its restore at the launch's end are Triton's, as
    is a helper's first patch of a module the launch had not patched (tl.core, for triton's own standard
    library). Compiled kernels are untouched; every interpreted kernel is checked against a reference anyway."""
    import inspect

    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter._patch_lang
    if getattr(original, "_kit_once", False):
        return
    launch = interpreter.GridExecutor.__call__
    patched_now: list[set[int]] = []  # the modules the launch in progress has patched (none: no launch)

    def in_one_launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        patched_now.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched_now.pop()

    def patch_lang(fn: Any) -> Any:
        langs = {id(v) for v in fn.__globals__.values() if inspect.ismodule(v) and v in (tl, tl.core)}
        if not langs or not patched_now:  # no language module (Triton's own assertion names it) or no launch
            return original(fn)
        if langs <= patched_now[-1]:
            return interpreter._LangPatchScope()
        scope = original(fn)
        patched_now[-1] |= langs  # once patched, not before (a failure part-way leaves them to be patched again)
        return scope

    patch_lang._kit_once = True  # type: ignore[attr-defined]
    interpreter._patch_lang = patch_lang
    interpreter.GridExecutor.__call__ = in_one_launch


def patch_triton_interpreter_tree_reduce() -> None:
    """Triton 3.6's interpreter reduces with a custom combine function (``tl.reduce(x, axis, fn)``: the union's
    ``_or``, and ``tl.topk``'s ``xor_sum`` at every stage of its bitonic sort) one element at a time: a Python
    call of ``fn`` per element, on 1-element tensors. In the slowest interpreted test that was 56 of its 72 s
    (cProfile: 2,944 reductions, 1.2 million 1-element tensors). Patched here, in the tests that interpret
    kernels on the CPU: integer reductions combine whole halves at once, neighbour with neighbour (element 2i
    with 2i+1, an odd last one carried over), log2(n) calls of ``fn`` on blocks. That keeps the order of the
    operands, so it equals the interpreter's left fold for any associative ``fn``, which Triton requires of a
    combine function (a GPU reduces by a tree, too) and which integer arithmetic keeps exact. Triton's own loop
    stays where the tree could differ: a non-integer Triton type (floats, and bf16 / fp8, which the interpreter
    stores as unsigned integers), a combine with Python control flow (an ``if`` on a block is one truth value for
    every element), and an empty block. tests/oea/test_triton_oea.py checks it against Triton's own loop."""
    import ast
    import functools
    import inspect
    import textwrap

    import triton.language as tl
    from triton.runtime import interpreter

    ops = interpreter.ReduceOps
    original = ops.generic_reduce
    if getattr(original, "_kit_tree", False):
        return

    @functools.cache
    def branching(fn: Any) -> bool:
        """Whether the combine's own code has Python control flow on values (if, while, for, a ? b : c, and, or)."""
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        flow = (ast.If, ast.IfExp, ast.While, ast.For, ast.BoolOp, ast.Match)
        return any(isinstance(node, flow) for node in ast.walk(tree))

    def tree_reduce(self: Any, input: tuple[Any, ...]) -> list[Any]:
        empty = input[0].handle.data.size == 0
        if empty or not all(arg.dtype.is_int() for arg in input) or branching(self.combine_fn.fn):
            return original(self, input)
        flat, axis = self.unravel(input, self.axis)
        kinds = [arg.dtype for arg in flat]
        parts = [np.moveaxis(arg.handle.data, axis, -1) for arg in flat]
        while parts[0].shape[-1] > 1:
            n = parts[0].shape[-1]
            even = n - n % 2
            left = [self.to_tensor(p[..., 0:even:2], kind) for p, kind in zip(parts, kinds, strict=True)]
            right = [self.to_tensor(p[..., 1:even:2], kind) for p, kind in zip(parts, kinds, strict=True)]
            out = self.combine_fn.fn(*left, *right)
            outs = out if isinstance(out, tuple) else (out,)
            shape = parts[0][..., 0:even:2].shape
            parts = [
                np.concatenate(
                    [np.broadcast_to(np.asarray(o.handle.data if isinstance(o, tl.core.tensor) else o), shape)
                     .astype(p.dtype), p[..., even:]],
                    axis=-1,
                )
                for o, p in zip(outs, parts, strict=True)
            ]  # fmt: skip
        ret = []
        for i, part in enumerate(parts):  # packed as Triton's own generic_reduce packs its result
            data = part[..., 0]
            if self.keep_dims:
                if self.axis is not None:
                    data = np.expand_dims(data, axis)
                else:  # as Triton's loop: one dimension per dimension of the flattened block, [1] (compiled: [1] * ndim)
                    for _ in range(flat[0].handle.data.ndim):
                        data = np.expand_dims(data, 0)
            elif self.axis is None:
                data = data.item()
            ret.append(self.to_tensor(data, input[i].dtype))
        return ret

    tree_reduce._kit_tree = True  # type: ignore[attr-defined]
    tree_reduce._kit_original = original  # type: ignore[attr-defined]
    ops.generic_reduce = tree_reduce
