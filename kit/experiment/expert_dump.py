"""Reading sglang's expert-distribution dump (``per_pass`` mode, ``_DetailAccumulator.dump``): a ``torch.save``
file ``{"records": [{"forward_pass_id", "rank", "gatherer_key", "global_physical_count": int tensor [layers,
physical experts]}, ...], "last_physical_to_logical_map": int tensor [layers, physical experts]}``, without torch.

The file is a zip of ``<name>/data.pkl`` (a pickle whose tensors are ``torch._utils._rebuild_tensor_v2`` over
persistent storages) and ``<name>/data/<key>`` (each storage's raw little-endian bytes). The unpickler resolves
only the globals a tensor dump needs (anything else is refused), and every size is bounded."""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kit.files.expert_pass import MAX_RAW_PASSES, BatchDistinct, LayerDistinct, RawPass

MAX_DUMP_BYTES = 1024 * 1024 * 1024
MAX_RECORDS = 100_000
IntArray = npt.NDArray[np.int64]

_STORAGES = {"IntStorage": np.int32, "LongStorage": np.int64, "ShortStorage": np.int16, "CharStorage": np.int8,
             "ByteStorage": np.uint8, "BoolStorage": np.bool_, "FloatStorage": np.float32,
             "DoubleStorage": np.float64, "HalfStorage": np.float16}


class DumpError(ValueError):
    """The dump is not what sglang's recorder writes (or is larger than kit reads)."""


def _check_view(storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """The element count of a tensor over ``storage``; DumpError unless it is a view inside it with no element
    repeated (offsets, sizes and strides not negative, not more elements than the storage holds): a stride of 0 or
    a negative offset would read outside or multiply memory without bound."""
    if offset < 0 or any(n < 0 for n in size) or any(st < 0 for st in stride):
        raise DumpError("a tensor has a negative offset, size or stride")
    count = int(np.prod(size)) if size else 1
    if count > storage.size:
        raise DumpError("a tensor has more elements than its storage (kit reads tensors that are views, not repeats)")
    if count and offset + sum((n - 1) * st for n, st in zip(size, stride, strict=True)) >= storage.size:
        raise DumpError("a tensor reaches past its storage")
    return count


class _StorageType:
    """What ``torch.IntStorage`` and its kin stand for here: a dtype's name, only ever named in a persistent id."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, *_: object) -> None:
        raise DumpError(f"the dump builds a torch.{self.name} object")


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(io.BytesIO(data))
        self.archive, self.prefix = archive, prefix
        self.budget = MAX_DUMP_BYTES  # bytes of tensors the dump may build in all

    def _rebuild_tensor(self, storage: np.ndarray, offset: int, size: tuple[int, ...], stride: tuple[int, ...],
                        *_: object) -> np.ndarray:
        count = _check_view(storage, offset, size, stride)
        self.budget -= count * storage.itemsize  # one storage named by many tensors is copied each time
        if self.budget < 0:
            raise DumpError(f"its tensors hold more than {MAX_DUMP_BYTES} bytes")
        strides = [st * storage.itemsize for st in stride]
        return np.lib.stride_tricks.as_strided(storage[offset:], shape=size, strides=strides).copy()

    def find_class(self, module: str, name: str) -> Callable[..., object]:
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return self._rebuild_tensor
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module == "torch" and name in _STORAGES:
            return _StorageType(name)
        raise DumpError(f"the dump names {module}.{name}, which a tensor dump does not need")

    def persistent_load(self, pid: object) -> np.ndarray:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            raise DumpError(f"unexpected persistent id {pid!r:.80}")
        if not isinstance(pid[1], _StorageType):
            raise DumpError(f"unexpected storage type {pid[1]!r:.80}")
        dtype = _STORAGES[pid[1].name]
        try:
            raw = self.archive.read(f"{self.prefix}data/{pid[2]}")
        except KeyError:
            raise DumpError(f"storage {pid[2]} is missing") from None
        return np.frombuffer(raw, dtype=np.dtype(dtype).newbyteorder("<"))


def read_dump(path: Path) -> dict[str, object]:
    """The dump's top-level dict, tensors as numpy arrays; DumpError when it is not a recorder dump."""
    if path.stat().st_size > MAX_DUMP_BYTES:
        raise DumpError(f"larger than {MAX_DUMP_BYTES} bytes")
    try:
        with zipfile.ZipFile(path) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
            if len(pkl) != 1:
                raise DumpError("not a torch.save zip file (no single data.pkl)")
            if sum(i.file_size for i in z.infolist()) > MAX_DUMP_BYTES:
                raise DumpError(f"unpacks to more than {MAX_DUMP_BYTES} bytes")
            obj = _Unpickler(z.read(pkl[0]), z, pkl[0][: -len("data.pkl")]).load()
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError) as e:
        if isinstance(e, DumpError):
            raise
        raise DumpError(f"unreadable: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("records"), list):
        raise DumpError("no 'records' list: not a per_pass dump (--expert-distribution-recorder-mode per_pass)")
    if len(obj["records"]) > MAX_RECORDS:
        raise DumpError(f"more than {MAX_RECORDS} forward passes")
    return obj


class DumpStats:
    """Distinct logical experts per MoE layer of each decode pass of a dump (``concurrency`` tokens at most)."""

    def __init__(self, dump: dict[str, object], top_k: int, concurrency: int) -> None:
        records = dump["records"]
        assert isinstance(records, list)
        p2l = dump.get("last_physical_to_logical_map")
        passes: list[tuple[int, IntArray]] = []
        for r in records:
            count = r.get("global_physical_count") if isinstance(r, dict) else None
            if not isinstance(count, np.ndarray) or count.ndim != 2:
                raise DumpError("a record without a [layers, experts] global_physical_count")
            passes.append((int(r.get("forward_pass_id", -1)), self._logical(count.astype(np.int64), p2l)))
        shapes = {c.shape for _, c in passes}
        if len(shapes) > 1:
            raise DumpError(f"records of different shapes {sorted(shapes)}")
        self.passes = len(passes)
        self.experts = passes[0][1].shape[1] if passes else None
        routed = np.zeros(passes[0][1].shape[0], dtype=bool) if passes else np.zeros(0, dtype=bool)
        for _, c in passes:
            routed |= c.sum(axis=1) > 0
        self.moe_layers = [int(i) for i in np.flatnonzero(routed)]  # dense layers never route a token
        self.decode: list[tuple[int, int, IntArray]] = []  # (forward pass id, batch, distinct per MoE layer)
        self.prefill = 0
        for fid, c in passes:
            batch = round(int(c.sum(axis=1).max()) / top_k)
            if batch == 0:
                continue
            if batch > concurrency:
                self.prefill += 1
                continue
            self.decode.append((fid, batch, np.count_nonzero(c[self.moe_layers], axis=1).astype(np.int64)))

    @staticmethod
    def _logical(count: IntArray, p2l: object) -> IntArray:
        """Counts per logical expert: physical replicas (EPLB) summed onto the expert they copy."""
        if not isinstance(p2l, np.ndarray) or p2l.shape != count.shape:
            return count
        out = np.zeros((count.shape[0], int(p2l.max()) + 1), dtype=np.int64)
        for layer in range(count.shape[0]):
            np.add.at(out[layer], p2l[layer].astype(np.int64), count[layer])
        return out

    def layers(self) -> list[LayerDistinct]:
        if not self.decode:
            return []
        table = np.stack([d for _, _, d in self.decode])  # [passes, moe layers]
        return [LayerDistinct(layer=layer, mean=round(float(col.mean()), 4), p50=float(np.percentile(col, 50)),
                              p90=round(float(np.percentile(col, 90)), 4), max=int(col.max()))
                for layer, col in zip(self.moe_layers, table.T, strict=True)]

    def by_batch(self) -> list[BatchDistinct]:
        sizes = sorted({b for _, b, _ in self.decode})
        return [BatchDistinct(batch=b, passes=len(rows), mean=round(float(np.mean(rows)), 4))
                for b in sizes for rows in [[d for _, bb, d in self.decode if bb == b]]]

    def mean(self) -> float | None:
        return round(float(np.mean([d for _, _, d in self.decode])), 4) if self.decode else None

    def raw(self) -> list[RawPass]:
        return [RawPass(forward_pass_id=f, batch=b, distinct=[int(x) for x in d])
                for f, b, d in self.decode[:MAX_RAW_PASSES]]
