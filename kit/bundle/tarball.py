"""Deterministic .tar.gz archives of bundles, and extraction of untrusted ones by whitelist.

Archive bytes depend only on the bundle's names and contents: entries sorted by the UTF-8 bytes
of their paths under one top folder (the bundle directory's name), uid/gid 0, empty user and
group names, modes 0644/0755, mtime 0 (not SOURCE_DATE_EPOCH: the same bundle must give the same
bytes on every machine and every day), PAX format, gzip level 9 with header mtime 0 and no file
name. The identity of a bundle stays its signed per-file sha256 list; the archive's sha256 is a
transport checksum (another zlib build could compress differently).

Extraction never calls ``tarfile.extract*``: members are read as a stream, only regular files and
directories with normalised names under one top folder are accepted, and each file is written
with ``open(dest, "xb")`` into a new, empty directory.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import stat
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Protocol

from kit.bundle.names import check_component, rel_problem, walk
from kit.errors import BundleError, UsageError
from kit.plumbing.files import CHUNK, NOFOLLOW, fsync_dir, sha256_file, temp_name
from kit.plumbing.tarinfo import normal_tarinfo

MTIME = 0
COMPRESSLEVEL = 9
MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 16 << 30
MAX_HEADER_BYTES = 1 << 20  # pax / GNU long-name header blocks are read into memory by tarfile
_TYPE_NAMES = {
    tarfile.SYMTYPE: "symbolic link", tarfile.LNKTYPE: "hard link", tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "FIFO", tarfile.CONTTYPE: "contiguous file",
    tarfile.GNUTYPE_SPARSE: "sparse file",
}


# --------------------------------------------------------------------------- writing


def archive(bundle_dir: Path, out: Path) -> str:
    """Write a deterministic .tar.gz of ``bundle_dir`` to ``out`` (atomically); return its sha256 hex.

    Refuses symlinks and special files in the bundle, and an ``out`` inside the bundle.
    """
    if not bundle_dir.is_dir():
        raise UsageError(f"{bundle_dir}: not a bundle directory")
    root = bundle_dir.resolve()
    top = check_component(root.name, "bundle directory name")
    if out.resolve().is_relative_to(root):
        raise UsageError(f"{out}: the archive cannot be written inside the bundle it archives")
    dirs, files = walk(root)
    entries = sorted([(d, True) for d in dirs] + [(f, False) for f in files], key=lambda e: e[0].encode())
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(out)  # streamed (an archive can be large), then renamed like plumbing's atomic_write
    try:
        with open(tmp, "xb") as raw:
            _write_tar_gz(raw, root, top, entries)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(out.parent)
    return archive_sha256(out)


def _write_tar_gz(raw: IO[bytes], root: Path, top: str, entries: list[tuple[str, bool]]) -> None:
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=MTIME, compresslevel=COMPRESSLEVEL) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT, encoding="utf-8") as tf:
        tf.addfile(_info(top, is_dir=True, size=0))
        for rel, is_dir in entries:
            if is_dir:
                tf.addfile(_info(f"{top}/{rel}", is_dir=True, size=0))
                continue
            fd = os.open(root / rel, os.O_RDONLY | NOFOLLOW)
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    raise BundleError(f"{rel}: not a regular file")
                tf.addfile(_info(f"{top}/{rel}", is_dir=False, size=st.st_size), f)


def _info(name: str, *, is_dir: bool, size: int) -> tarfile.TarInfo:
    if is_dir:
        return normal_tarinfo(name, tarfile.DIRTYPE, 0o755, mtime=MTIME)
    return normal_tarinfo(name, tarfile.REGTYPE, 0o644, mtime=MTIME, size=size)


def archive_sha256(path: Path) -> str:
    return sha256_file(path.resolve())[0]  # the archive may be reached through a link


# --------------------------------------------------------------------------- reading untrusted archives


@contextmanager
def extracted(archive_path: Path) -> Iterator[Path]:
    """Extract safely into a new temp directory; yield the bundle's top folder; always clean up."""
    tmp = Path(tempfile.mkdtemp(prefix="kit-verify-"))
    try:
        yield safe_extract(archive_path, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def safe_extract(
    archive_path: Path, dest: Path, *, max_members: int | None = None, max_bytes: int | None = None
) -> Path:
    """Extract ``archive_path`` (.tar.gz) into the new, empty directory ``dest``; return ``dest/<top>``.

    Accepts only regular files and directories with normalised relative names under one top folder;
    refuses links, devices, FIFOs, duplicates, and more than ``max_members`` members or
    ``max_bytes`` bytes of content (defaults MAX_MEMBERS, MAX_TOTAL_BYTES). BundleError on refusal.
    """
    members = MAX_MEMBERS if max_members is None else max_members
    limit = MAX_TOTAL_BYTES if max_bytes is None else max_bytes
    if not dest.is_dir() or dest.is_symlink() or any(dest.iterdir()):
        raise BundleError(f"{dest}: extraction needs a new, empty directory")
    x = _Extractor(dest, members, limit, str(archive_path))
    try:
        with open(archive_path, "rb") as raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            # content plus, per member, a header, a pax header and its data block, and the padding
            overhead = (members + 16) * 4 * tarfile.BLOCKSIZE + MAX_HEADER_BYTES + tarfile.RECORDSIZE
            stream = _Capped(gz, limit + overhead, x.label)
            with tarfile.open(fileobj=stream, mode="r|", tarinfo=_GuardedInfo) as tf:
                for m in tf:
                    x.take(tf, m)
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise BundleError(f"{x.label}: not a readable .tar.gz ({type(e).__name__}: {e})") from None
    except OSError as e:
        raise BundleError(f"{x.label}: extraction failed ({e})") from None
    return x.finish()


class _GuardedInfo(tarfile.TarInfo):
    """Refuses oversized pax / GNU long-name headers before tarfile reads them into memory."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                         tarfile.GNUTYPE_LONGLINK) and self.size > MAX_HEADER_BYTES:
            raise BundleError(f"archive header of {self.size} bytes refused (limit {MAX_HEADER_BYTES})")
        return super()._proc_member(tarfile_)  # type: ignore[misc]


class _Reader(Protocol):
    def read(self, n: int = -1, /) -> bytes: ...


class _Capped(io.RawIOBase):
    """A reader that refuses to yield more than ``limit`` decompressed bytes (gzip bombs)."""

    def __init__(self, inner: _Reader, limit: int, label: str) -> None:
        self.inner, self.left, self.label = inner, limit, label

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n if n >= 0 else self.left + 1)
        self.left -= len(data)
        if self.left < 0:
            raise BundleError(f"{self.label}: decompresses to more than the size limit")
        return data


class _Extractor:
    def __init__(self, dest: Path, max_members: int, max_bytes: int, label: str) -> None:
        self.dest, self.max_members, self.max_bytes, self.label = dest, max_members, max_bytes, label
        self.count = 0
        self.total = 0
        self.top: str | None = None
        self.seen: set[str] = set()

    def refuse(self, name: str, why: str) -> BundleError:
        return BundleError(f"{self.label}: member {name!r} refused: {why}")

    def take(self, tf: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        self.count += 1
        if self.count > self.max_members:
            raise BundleError(f"{self.label}: more than {self.max_members} members; refused")
        name = self.check_name(m)
        if m.type == tarfile.DIRTYPE:
            (self.dest / name).mkdir(mode=0o755, parents=True, exist_ok=True)
            return
        if "/" not in name:
            raise self.refuse(name, "a file outside the top folder")
        self.total += m.size
        if self.total > self.max_bytes:
            raise BundleError(f"{self.label}: content exceeds {self.max_bytes} bytes; refused")
        src = tf.extractfile(m)
        if src is None:
            raise self.refuse(name, "unreadable member")
        self.write(name, src, m.size)

    def check_name(self, m: tarfile.TarInfo) -> str:
        name = m.name
        if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
            raise self.refuse(name, f"a {_TYPE_NAMES.get(m.type, f'type {m.type!r} member')}; only regular "
                                    "files and directories are allowed")
        if why := rel_problem(name):
            raise self.refuse(name, why)
        if name in self.seen:
            raise self.refuse(name, "duplicate name")
        self.seen.add(name)
        top = name.split("/", 1)[0]
        if self.top is None:
            self.top = top
        elif top != self.top:
            raise self.refuse(name, f"a second top folder (the first was {self.top!r})")
        return name

    def write(self, name: str, src: IO[bytes], size: int) -> None:
        dest = self.dest / name
        dest.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        written = 0
        with open(dest, "xb") as out:
            while written < size and (chunk := src.read(min(CHUNK, size - written))):
                out.write(chunk)
                written += len(chunk)
        if written != size:
            raise self.refuse(name, f"truncated ({written} of {size} bytes)")
        dest.chmod(0o644)

    def finish(self) -> Path:
        if self.top is None:
            raise BundleError(f"{self.label}: empty archive")
        root = self.dest / self.top
        if not root.is_dir():
            raise BundleError(f"{self.label}: the top entry {self.top!r} is not a folder")
        return root
