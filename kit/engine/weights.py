"""The engine's random weights: drawn from ``numpy.random.default_rng(seed)``, or read back from a file of an earlier
draw (the same bytes, checked against the sha256 written with them).

Drawing the demo's 257 MiB takes about 2.7 s of CPU at every server start (24 starts in `make demo`). A file of an
earlier draw is mapped read-only where that is safe (``_mappable``: the user's own file, writable by nobody else, on a
local filesystem), not read: the engines of every cell share its pages in the page cache, and a start costs the
sha256 over it (0.15 s here) instead of copying it into fresh memory (1.9 s of system time here, measured
2026-12-07); elsewhere it is read into memory as before. kit's writers only ever rename complete files into place,
so a mapped file never changes under an engine. The file's name is a hash
of what decides the draw (the seed, each array's name, shape and scale, the numpy version and this format), so a
changed model or numpy draws afresh. The cache is an optimisation only: a directory that cannot be made or written,
a full disk, or a file that is short, foreign or damaged leaves a logged line and a fresh draw, never an error. It
keeps the ``KEEP`` most recently used files and caches only draws of at least ``MIN_BYTES`` (smaller ones draw
faster than they hash).
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import re
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from io import BufferedReader
from pathlib import Path

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]

log = logging.getLogger("kit.engine")

FORMAT = 2  # 2: the values start at a multiple of ALIGN bytes (1 left them where the header ended)
ALIGN = 64  # bytes: the mapped arrays' alignment (a cache line; what numpy's SIMD loops and BLAS like)
MAGIC = b"kit-engine-weights\n"
HEADER_MAX = 64 << 10  # bytes of the header line read before any check
MIN_BYTES = 32 << 20
KEEP = 4
TMP_SUFFIX = ".tmp"
OURS = re.compile(r"[0-9a-f]{64}\.bin")  # a draw's file: key(...).bin
OURS_TMP = re.compile(r"\.[0-9a-f]{16}\.[A-Za-z0-9_]+" + re.escape(TMP_SUFFIX))  # a writer's, before its rename
STALE_TMP_S = 3600.0
MOUNTINFO_MAX = 1 << 20  # bytes of /proc/self/mountinfo read
# where a cache file is mapped (_mappable); elsewhere (nfs, cifs, fuse, 9p, ...) it is read into memory
LOCAL_FILESYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "f2fs", "bcachefs", "zfs", "tmpfs", "overlay"})


@dataclass(frozen=True)
class Draw:
    """One array drawn in turn from the generator: ``standard_normal(shape, float32) * std``."""

    name: str
    shape: tuple[int, ...]
    std: float

    @property
    def count(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


def draw(seed: int, draws: Sequence[Draw]) -> dict[str, FloatArray]:
    """Each array in order from one ``default_rng(seed)``."""
    rng = np.random.default_rng(seed)
    out: dict[str, FloatArray] = {}
    for d in draws:
        a = rng.standard_normal(size=d.shape, dtype=np.float32)
        a *= np.float32(d.std)
        out[d.name] = a
    return out


def key(seed: int, draws: Sequence[Draw]) -> str:
    """The hash naming a draw's file: everything that decides its bytes."""
    spec = {"format": FORMAT, "numpy": np.__version__, "seed": seed,
            "draws": [[d.name, list(d.shape), repr(float(d.std))] for d in draws]}
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def load_or_draw(seed: int, draws: Sequence[Draw], cache: Path | None, *,
                 min_bytes: int = MIN_BYTES) -> tuple[dict[str, FloatArray], str]:
    """The arrays, and how they were had (for the log): read from ``cache``, or drawn (and cached there where it
    can be)."""
    size = 4 * sum(d.count for d in draws)
    if cache is None or size < min_bytes:
        return draw(seed, draws), "drawn"
    name = key(seed, draws)
    path = cache / f"{name}.bin"
    arrays, problem = _read(path, name, draws)
    if arrays is not None:
        _touch(path)
        return arrays, f"read from {path}"
    if problem:
        log.warning("weights cache: ignored %s (%s); drawing again", path, problem)
    arrays = draw(seed, draws)
    unwritten = _write(cache, path, name, draws, arrays)
    return arrays, f"drawn and cached in {path}" if unwritten is None else f"drawn (not cached: {unwritten})"


def _read(path: Path, name: str, draws: Sequence[Draw]) -> tuple[dict[str, FloatArray] | None, str]:
    """The arrays in ``path``, or None and what is wrong with it ("" where there is no such file)."""
    total = sum(d.count for d in draws)
    try:
        if not path.is_file():
            return None, ""
        with open(path, "rb") as f:
            if f.read(len(MAGIC)) != MAGIC:
                return None, "not a weights file"
            line = f.readline(HEADER_MAX)
            if not line.endswith(b"\n"):
                return None, "no header line"
            header = json.loads(line)
            if not isinstance(header, dict) or header.get("key") != name or header.get("count") != total:
                return None, "written for other weights"
            start, want = f.tell(), 4 * total
            st = os.fstat(f.fileno())
            got = st.st_size - start
            if got != want:
                return None, f"{got} of {want} bytes of values" if got < want else "trailing bytes"
            if _mappable(st, path) and start % ALIGN == 0:  # read-only, on the file's pages
                flat = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), "<f4", total, start)
            else:  # a copy of its own (an unaligned file would be copied by numpy's loops at every step)
                flat = np.empty(total, dtype="<f4")
                if (n := _read_into(f, flat.data.cast("B"))) != want:
                    return None, f"{n} of {want} bytes of values"
    except (OSError, ValueError, RecursionError) as exc:  # json.JSONDecodeError is a ValueError; a deep header
        return None, str(exc) or type(exc).__name__
    if hashlib.sha256(flat.data).hexdigest() != header.get("sha256"):
        return None, "sha256 differs from its header"
    flat = flat.astype(np.float32, copy=False)
    arrays: dict[str, FloatArray] = {}
    at = 0
    for d in draws:
        arrays[d.name] = flat[at:at + d.count].reshape(d.shape)
        at += d.count
    return arrays, ""


def _read_into(f: BufferedReader, buf: memoryview) -> int:
    """Bytes read into ``buf`` until it is full or the file ends (readinto may return less)."""
    got = 0
    while got < len(buf):
        n = f.readinto(buf[got:])
        if not n:
            break
        got += n
    return got


def _mappable(st: os.stat_result, path: Path) -> bool:
    """Whether the file may be mapped rather than copied: it is this user's, nobody else may write it, and it is on a
    local filesystem. Pages of a mapped file are read again whenever memory is short, after the sha256 was checked:
    a file changed in place would change the weights, and one removed or cut short on a network filesystem (another
    node's engine evicting it from a shared cache) would end the engine with SIGBUS."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022 and _filesystem(path) in LOCAL_FILESYSTEMS


def _filesystem(path: Path) -> str | None:
    """The type of the filesystem ``path`` is on: the longest mount point above it in /proc/self/mountinfo (None
    where that cannot be read)."""
    try:
        real = os.path.realpath(path)
        with open("/proc/self/mountinfo", "rb") as f:
            lines = f.read(MOUNTINFO_MAX).decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    best, kind = "", None
    for line in lines:
        left, _, right = line.partition(" - ")
        fields = left.split()
        if len(fields) < 5 or not right:
            continue
        point = fields[4].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, right.split(" ", 1)[0]
    return kind


def _write(cache: Path, path: Path, name: str, draws: Sequence[Draw], arrays: dict[str, FloatArray]) -> str | None:
    """Write the draw next to its final name and rename it into place (a reader sees all of it or none); keep the
    ``KEEP`` newest files. What went wrong, or None. No fsync: a file a crash left short or torn fails its sha256
    at the next read and is drawn again."""
    tmp: str | None = None
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{name[:16]}.", suffix=TMP_SUFFIX)
        os.fchmod(fd, 0o644)  # readable by the other users of a shared cache, as a file made with open() would be
        blobs = [np.ascontiguousarray(arrays[d.name], dtype="<f4").data for d in draws]  # views, no copies
        digest = hashlib.sha256()
        for blob in blobs:
            digest.update(blob)
        header = {"key": name, "count": sum(d.count for d in draws), "sha256": digest.hexdigest(),
                  "draws": [[d.name, list(d.shape)] for d in draws]}
        with os.fdopen(fd, "wb") as f:
            head = MAGIC + json.dumps(header).encode()
            f.write(head + b" " * (-(len(head) + 1) % ALIGN) + b"\n")  # JSON allows the padding
            for blob in blobs:
                f.write(blob)
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        return str(exc)
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    _evict(cache, keep=path)
    return None


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except OSError:
        pass


def _evict(cache: Path, keep: Path) -> None:
    """Remove all but the ``KEEP`` most recently used weights files (``keep`` stays), and the temporary files of
    writers killed mid-write over an hour ago. Only names this module makes are touched: a directory given with
    --weights-cache may hold other files."""
    now = time.time()
    dated: list[tuple[float, Path]] = []
    try:
        names = list(cache.iterdir())
    except OSError:  # a directory it may write but not list: nothing is evicted
        return
    for p in names:
        try:
            if OURS.fullmatch(p.name) and p != keep:
                dated.append((p.lstat().st_mtime, p))
            elif OURS_TMP.fullmatch(p.name) and now - p.lstat().st_mtime > STALE_TMP_S:
                p.unlink(missing_ok=True)
        except OSError:  # gone meanwhile (another engine's eviction), or unreadable: not ours to judge
            continue
    for _, old in sorted(dated, reverse=True)[KEEP - 1:]:
        try:
            old.unlink(missing_ok=True)
        except OSError:
            continue
