"""Hashing and writing files: one hasher, one atomic writer, bounded reads.

Writes never follow a symlink at the target (the target is replaced, not written through), and a
crash leaves either the old file or the new one, never half of either.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

CHUNK = 1 << 20
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
TEMP_MARK = ".tmp-"  # temp files are ``.<name>.tmp-<pid>-<8 hex>`` beside their target


def sha256_file(path: Path, limit: int | None = None, *, follow: bool = False) -> tuple[str, int]:
    """sha256 hex digest and size of a regular file, by default never following a symlink (OSError ELOOP); opened
    as ``open_regular`` opens it, so a FIFO, device or directory is refused (OSError) at once, never waited on.
    With ``limit``, a file whose size is over it is not read at all, and reading stops once more than ``limit``
    bytes were read (a file that grows, or a /proc file of size 0): the size returned is then above it (and the
    digest is of a prefix), so a file that should hold ``limit`` bytes costs at most that to refuse, however large."""
    h = hashlib.sha256()
    size = 0
    with open_regular(path, follow=follow) as f:
        if limit is not None and (stated := os.fstat(f.fileno()).st_size) > limit:
            return h.hexdigest(), stated  # of the empty prefix: nothing read
        for chunk in read_chunks(f, limit):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def read_chunks(f: BinaryIO, limit: int | None = None) -> Iterator[bytes]:
    """``f``'s bytes in chunks of at most CHUNK; with ``limit``, no more than ``limit + 1`` bytes in all (the last
    chunk takes the total past ``limit`` only where the file holds more: the caller's sign that it is too large)."""
    size = 0
    while chunk := f.read(CHUNK if limit is None else min(CHUNK, limit - size + 1)):
        size += len(chunk)
        yield chunk
        if limit is not None and size > limit:
            return


def temp_name(dest: Path) -> Path:
    return dest.with_name(f".{dest.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}")


def atomic_write(dest: Path, data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to a new temp file beside ``dest`` (O_EXCL|O_NOFOLLOW), fsync it, rename it over
    ``dest`` (a symlink at ``dest`` is replaced, never followed), fsync the directory."""
    with atomic_writer(dest, mode) as f:
        f.write(data)
    return dest


@contextlib.contextmanager
def atomic_writer(dest: Path, mode: int = 0o644) -> Iterator[BinaryIO]:
    """``atomic_write`` for content written as a stream (an archive): the file object writes a new temp file
    beside ``dest`` (O_EXCL|O_NOFOLLOW); on a clean exit it is fsynced and renamed over ``dest``, on any
    exception removed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    _replaceable(dest)
    tmp = temp_name(dest)
    try:  # opened inside the try: a signal handled the moment open() returns must still remove the new file
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NOFOLLOW, mode), "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException as e:
        if not (isinstance(e, FileExistsError) and e.filename == str(tmp)):  # O_EXCL found one not ours: kept
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(dest.parent)


def _replaceable(dest: Path) -> None:
    """Raise unless ``dest`` is absent, a regular file or a symlink (replaced, never followed): renaming over a
    device, a pipe or a socket would swap it for a file for every process (``/dev/null`` as root)."""
    try:
        mode = os.lstat(dest).st_mode
    except FileNotFoundError:
        return
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OSError(errno.EEXIST, "not a regular file: kit replaces only files, never a device, pipe or directory",
                      str(dest))


def append_line(dest: Path, line: bytes) -> Path:
    """Append one line and flush it to disk (JSON Lines files written as things happen)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_APPEND | NOFOLLOW, 0o644)
    with os.fdopen(fd, "ab") as f:
        f.write(line)
        f.flush()
        os.fsync(f.fileno())
    return dest


def fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


MAX_TREE_DEPTH = 32  # folders below a bundle's root (kit writes four at most)


class TreeTooDeep(Exception):
    """``tree`` found folders nested deeper than its limit (``rel``: the first such folder)."""

    def __init__(self, rel: str, limit: int) -> None:
        super().__init__(f"{rel}: nested deeper than {limit} directories")
        self.rel, self.limit = rel, limit


def tree(root: Path, max_depth: int = MAX_TREE_DEPTH) -> Iterator[tuple[str, int]]:
    """(relative POSIX path, mode as ``lstat`` reads it) of everything below ``root``: without recursion (a
    hostile depth cannot exhaust the stack) and entering no link; ``TreeTooDeep`` past ``max_depth`` folders,
    ``OSError`` where a folder cannot be listed (never skipped: what is inside it would go unseen)."""
    pending: list[tuple[str, str, int]] = [(str(root), "", 0)]
    while pending:
        base, prefix, depth = pending.pop()
        if depth > max_depth:
            raise TreeTooDeep(prefix.rstrip("/"), max_depth)
        with os.scandir(base) as it:
            entries = list(it)
        for e in entries:
            mode = e.stat(follow_symlinks=False).st_mode
            yield prefix + e.name, mode
            if stat.S_ISDIR(mode):
                pending.append((e.path, f"{prefix}{e.name}/", depth + 1))


def first_link(root: Path) -> str | None:
    """The first symbolic link below ``root``, relative (``root`` itself may be one), or None; ``tree``'s errors."""
    return next((rel for rel, mode in tree(root) if stat.S_ISLNK(mode)), None)


class TooLarge(ValueError):
    """A bounded read found more than its limit."""


def open_regular(path: Path, *, follow: bool = True) -> BinaryIO:
    """``path`` opened for reading, refused (OSError) unless a regular file: opened without blocking, so a FIFO
    is refused at once instead of waiting for a writer; ``follow`` False: a symbolic link is refused too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else NOFOLLOW))
    except OSError as e:
        if not follow and e.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "a symbolic link, not followed", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode  # before fdopen: it refuses a directory itself, naming the descriptor, not the path
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
        raise OSError(f"{path}: not a regular file ({stat.filemode(mode)})")
    return os.fdopen(fd, "rb")  # O_NONBLOCK means nothing to a regular file's reads


def read_bounded(path: Path, limit: int, *, follow: bool = True) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, reading at most ``limit + 1`` of them
    (``/dev/zero`` or a huge file fails at once). OSError for missing files, directories, FIFOs and
    other special files, and (``follow`` False: a bundle's files) a symbolic link; TooLarge beyond the limit."""
    with open_regular(path, follow=follow) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"{path}: larger than {limit} bytes")
    return data
