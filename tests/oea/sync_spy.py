"""Find host syncs and data-dependent shapes in a torch function without a GPU.

The function runs on ``meta`` tensors (shapes, no data) under a dispatch mode that sees every aten op.
Anything that would stall or break a CUDA graph on a real GPU is reported: reading a value on the host
(``.item()``, ``.tolist()``, ``bool(t)``), ops whose output shape depends on data (``nonzero``, boolean-mask
indexing, ``unique``), tensors materialised from Python values (``t[idx] = True``, ``torch.tensor(...)``:
a host-to-device copy on CUDA, which fails under graph capture), and any tensor not on the device under
test (``.cpu()``, a CPU index). Meta kernels also raise on the first two kinds by themselves; the spy turns
that into a report too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# aten ops that read device data on the host, or whose output shape depends on the data.
HOST_OR_DYNAMIC = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "is_nonzero",
        "equal",
        "allclose",
        "nonzero",
        "argwhere",
        "masked_select",
        "masked_scatter",
        "unique",
        "_unique",
        "_unique2",
        "unique_dim",
        "unique_consecutive",
        "repeat_interleave",
        "bincount",
        "histc",
    }
)
# aten ops that build a tensor from a Python value: on CUDA that is a host-to-device copy.
FROM_HOST = frozenset({"scalar_tensor", "lift_fresh", "lift_fresh_copy"})
INDEXING = frozenset({"index", "index_put", "index_put_", "_index_put_impl_"})


class SyncSpy(TorchDispatchMode):
    """Records every aten op and the reasons some of them would sync or break a graph."""

    def __init__(self, device: str = "meta") -> None:
        super().__init__()
        self.device = device
        self.ops: list[str] = []
        self.problems: list[str] = []

    def _check_tensors(self, name: str, values: Any, role: str) -> None:
        for value in tree_flatten(values)[0]:
            if isinstance(value, torch.Tensor) and value.device.type != self.device:
                self.problems.append(f"{name}: {role} tensor on {value.device} (host<->device copy)")

    def _check_indexing(self, name: str, args: tuple[Any, ...]) -> None:
        if name not in INDEXING or len(args) < 2:
            return
        for index in tree_flatten(args[1])[0]:
            if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
                self.problems.append(f"{name}: boolean-mask index (data-dependent shape)")

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        self.ops.append(name)
        if name in HOST_OR_DYNAMIC:
            self.problems.append(f"{name}: reads device data on the host or has a data-dependent shape")
        if name in FROM_HOST:
            self.problems.append(f"{name}: materialises a Python value as a tensor (host-to-device copy)")
        self._check_indexing(name, args)
        self._check_tensors(name, (args, kwargs), "input")
        out = func(*args, **kwargs)
        self._check_tensors(name, out, "output")
        return out


def host_sync_problems(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[list[str], list[str]]:
    """(problems, aten ops seen) for ``fn(*args, **kwargs)``; ``args`` should be meta tensors."""
    spy = SyncSpy()
    try:
        with spy:
            fn(*args, **kwargs)
    except (RuntimeError, NotImplementedError) as exc:  # meta kernels refuse .item(), nonzero, ...
        spy.problems.append(f"raised on meta tensors: {type(exc).__name__}: {str(exc).splitlines()[0]}")
    return spy.problems, spy.ops
