"""Reading untrusted bundle archives: provenance first, then only signed, size-bounded, hash-checked files.

Extraction never calls ``tarfile.extract*``: members are read as one stream, only regular files and
directories with normalised names under one top folder are accepted. With a ``check`` (what
``kit verify ARCHIVE`` uses) the first regular file must be ``provenance.dsse.json``; ``check`` verifies
it (signatures, subjects, policy) and returns the signed statement, and from then on a member is
refused at once when it is not a signed subject, when its header says more bytes than its signed size
(or than what is left of ``MAX_TOTAL_BYTES`` when the statement carries no sizes), or when its sha256
differs. Each file is written to a temp file in the extraction directory while hashing, and renamed into
place only when its size and digest match: nothing unverified lands under the bundle's name.

Header chains (pax and GNU long-name/long-link headers before a member) are bounded to
``MAX_HEADER_CHAIN`` and names to ``MAX_PATH_DEPTH`` components, so hostile headers give a BundleError
(exit 9), never a RecursionError.

Nothing may follow the archive's end: after the end-of-archive block only zero bytes (tar's padding) are
accepted up to the end of the file, so a second gzip member or a second tar after the zero blocks (which
``tar -i`` and ``tarfile``'s ``ignore_zeros`` would extract, unchecked) is refused. The file is hashed as it
is read (``sha256``), so the digest kit reports is that of the bytes it verified, not of a later read.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Protocol

from kit.bundle.names import PROVENANCE, rel_problem
from kit.bundle.subjects import subject_sizes
from kit.errors import FIX_SPACE, BundleError, storage_error
from kit.plumbing.files import CHUNK, open_regular
from kit.signing import subject_digests

MAX_MEMBERS = 100_000
MAX_TOTAL_BYTES = 16 << 30
MAX_HEADER_BYTES = 1 << 20  # pax / GNU long-name header blocks are read into memory by tarfile
MAX_HEADER_CHAIN = 8  # pax, global pax, GNU long name, GNU long link: a real member needs at most 3
MAX_PATH_DEPTH = 32
MAX_NAME_BYTES = 4096
MAX_PROVENANCE_BYTES = 256 << 20  # the same bound as kit.bundle.verify's reading of it
_EXTENDED = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
             tarfile.GNUTYPE_LONGLINK)
_TYPE_NAMES = {
    tarfile.SYMTYPE: "symbolic link", tarfile.LNKTYPE: "hard link", tarfile.CHRTYPE: "character device",
    tarfile.BLKTYPE: "block device", tarfile.FIFOTYPE: "FIFO", tarfile.CONTTYPE: "contiguous file",
    tarfile.GNUTYPE_SPARSE: "sparse file",
}

_IMMUTABLE = "a bundle is immutable once signed; get an untouched copy"

Check = Callable[[Path], Mapping[str, Any]]
"""Verifies the extracted provenance.dsse.json (raising BundleError) and returns its signed statement."""

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz")  # the names `kit archive` writes (any case)
GZIP_MAGIC = b"\x1f\x8b"


def archive_name(path: Path) -> bool:
    """Whether ``path``'s name says it is a `kit archive` file (.tar.gz or .tgz, in any case)."""
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def is_archive(path: Path) -> bool:
    """Whether ``path`` is to be read as a bundle archive: named .tar.gz/.tgz (any case), or a regular file whose
    first bytes are gzip's magic (1f 8b), whatever its name (`kit archive -o run.tar` once wrote gzip so). Reads
    at most two bytes, never blocks on a FIFO and never reads a device (neither is a regular file)."""
    if archive_name(path):
        return True
    try:
        with open_regular(path) as f:
            return f.read(len(GZIP_MAGIC)) == GZIP_MAGIC
    except OSError:
        return False


@contextmanager
def extracted(archive_path: Path, check: Check | None = None, sha256: Any = None) -> Iterator[Path]:
    """Extract safely into a new temp directory; yield the bundle's top folder; always clean up."""
    tmp = Path(tempfile.mkdtemp(prefix="kit-verify-"))
    try:
        yield safe_extract(archive_path, tmp, check=check, sha256=sha256)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def safe_extract(
    archive_path: Path, dest: Path, *, check: Check | None = None, max_members: int | None = None,
    max_bytes: int | None = None, sha256: Any = None,
) -> Path:
    """Extract ``archive_path`` (.tar.gz) into the new, empty directory ``dest``; return ``dest/<top>``.

    Accepts only regular files and directories with normalised relative names under one top folder;
    refuses links, devices, FIFOs, duplicates, and more than ``max_members`` members or
    ``max_bytes`` bytes of content (defaults MAX_MEMBERS, MAX_TOTAL_BYTES). With ``check``, files are
    checked against the signed provenance as they stream (see the module doc). Anything but zero bytes after the
    end-of-archive block is refused. ``sha256`` (a ``hashlib.sha256()``) is fed every byte of the file as it is
    read. BundleError on refusal.
    """
    members = MAX_MEMBERS if max_members is None else max_members
    limit = MAX_TOTAL_BYTES if max_bytes is None else max_bytes
    if not dest.is_dir() or dest.is_symlink() or any(dest.iterdir()):
        raise BundleError(f"{dest}: extraction needs a new, empty directory")
    x = _Extractor(dest, members, limit, str(archive_path), check)
    try:
        with open_regular(archive_path) as f:  # a FIFO or a device swapped in after the caller looked: refused
            raw = _Hashing(f, sha256)
            with gzip.GzipFile(fileobj=raw, mode="rb") as gz:
                # content plus, per member, a header, a pax header and its data block, and the padding
                overhead = (members + 16) * 4 * tarfile.BLOCKSIZE + MAX_HEADER_BYTES + tarfile.RECORDSIZE
                stream = _Capped(gz, limit + overhead, x.label)
                with tarfile.open(fileobj=stream, mode="r|", tarinfo=_GuardedInfo) as tf:
                    for m in tf:
                        x.take(tf, m)
                    _only_padding(tf, x.label)
            while raw.read(CHUNK):  # what gzip left unread (nothing, normally): hashed too
                pass
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise BundleError(f"{x.label}: not a readable .tar.gz ({type(e).__name__}: {e})",
                          hint="the archive is cut short or damaged: copy it again and compare its sha256 with the "
                               "one `kit archive` printed for its sender") from None
    except RecursionError:  # defence in depth: the chain and depth limits should make this unreachable
        raise BundleError(f"{x.label}: archive headers nest too deeply; refused") from None
    except OSError as e:
        where = f"{FIX_SPACE} where kit extracts ({dest.parent}; TMPDIR picks it), then retry"
        if full := storage_error(e, where):
            raise full.note(f"extracting {x.label}: the archive was not judged") from None
        raise BundleError(f"{x.label}: extraction failed ({e})") from None
    return x.finish()


class _GuardedInfo(tarfile.TarInfo):
    """Refuses oversized pax / GNU long-name headers before tarfile reads them into memory, and chains of
    more than MAX_HEADER_CHAIN of them (tarfile handles each by recursing into the next header)."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> Any:
        if self.type not in _EXTENDED:
            return super()._proc_member(tarfile_)  # type: ignore[misc]
        if self.size > MAX_HEADER_BYTES:
            raise BundleError(f"archive header of {self.size} bytes refused (limit {MAX_HEADER_BYTES})")
        depth = getattr(tarfile_, "_kit_header_chain", 0) + 1
        if depth > MAX_HEADER_CHAIN:
            raise BundleError(f"more than {MAX_HEADER_CHAIN} pax/GNU long-name headers before one member; refused")
        setattr(tarfile_, "_kit_header_chain", depth)  # noqa: B010 - a private counter on tarfile's object
        try:
            return super()._proc_member(tarfile_)  # type: ignore[misc]
        finally:
            setattr(tarfile_, "_kit_header_chain", depth - 1)  # noqa: B010


def _only_padding(tf: tarfile.TarFile, label: str) -> None:
    """After tar's end-of-archive block, the rest of the stream (a gzip file holding more members reads on into
    them) must be zero bytes."""
    rest = tf.fileobj
    assert rest is not None
    while chunk := rest.read(CHUNK):
        if chunk.strip(b"\0"):
            raise BundleError(f"{label}: data after the end of the archive (another tar or gzip member appended?); "
                              "refused: other tools (`tar -i`) would extract what kit never checked",
                              hint="re-create the archive with `kit archive BUNDLE`")


class _Hashing(io.RawIOBase):
    """A binary reader that feeds what it reads to ``sha256`` (when given)."""

    def __init__(self, inner: IO[bytes], sha256: Any) -> None:
        self.inner, self.sha256 = inner, sha256

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        data = self.inner.read(n)
        if self.sha256 is not None:
            self.sha256.update(data)
        return data


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
    def __init__(self, dest: Path, max_members: int, max_bytes: int, label: str, check: Check | None) -> None:
        self.dest, self.max_members, self.max_bytes, self.label = dest, max_members, max_bytes, label
        self.check = check
        self.count = 0
        self.total = 0
        self.top: str | None = None
        self.seen: set[str] = set()
        self.digests: dict[str, str] | None = None  # the signed subjects, once provenance verified
        self.sizes: dict[str, int] = {}

    def refuse(self, name: str, why: str) -> BundleError:
        return BundleError(f"{self.label}: member {name!r} refused: {why}")

    def take(self, tf: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        self.count += 1
        if self.count > self.max_members:
            raise BundleError(f"{self.label}: more than {self.max_members} members; refused")
        name = self.check_name(m)
        if m.type == tarfile.DIRTYPE:
            self.mkdirs(name)
            return
        if "/" not in name:
            raise self.refuse(name, "a file outside the top folder")
        rel = name.split("/", 1)[1]
        expected = self.expect(name, rel, m.size)
        self.total += m.size
        if self.total > self.max_bytes:
            raise BundleError(f"{self.label}: content exceeds {self.max_bytes} bytes; refused")
        src = tf.extractfile(m)
        if src is None:
            raise self.refuse(name, "unreadable member")
        self.write(name, src, m.size, expected)
        if self.check is not None and self.digests is None:
            self.verify_provenance(name)

    def expect(self, name: str, rel: str, size: int) -> str | None:
        """The signed sha256 that ``rel`` must have (None: no check, or provenance itself); refuses at once
        what the signed provenance does not allow."""
        if self.check is None:
            return None
        if self.digests is None:
            if rel != PROVENANCE:
                raise BundleError(
                    f"{self.label}: the first file is {name!r}, not {PROVENANCE}; refused before writing anything "
                    f"(kit verifies an archive's signed file list before it extracts a byte)",
                    hint="re-create the archive with `kit archive BUNDLE` (it puts the provenance first)")
            if size > MAX_PROVENANCE_BYTES:
                raise self.refuse(name, f"larger than {MAX_PROVENANCE_BYTES} bytes")
            return None
        if rel not in self.digests:
            raise BundleError(f"{self.label}: extra file not in provenance: {rel} (refused before writing any of it)",
                              hint=_IMMUTABLE)
        signed = self.sizes.get(rel)
        if signed is not None and size != signed:
            more = "larger" if size > signed else "smaller"
            raise BundleError(f"{self.label}: {rel}: {size} bytes, {more} than its signed size of {signed} bytes "
                              "(refused before writing any of it)", hint=_IMMUTABLE)
        return self.digests[rel]

    def verify_provenance(self, name: str) -> None:
        assert self.check is not None
        stmt = self.check(self.dest / name)
        self.digests = subject_digests(dict(stmt))
        try:
            self.sizes = subject_sizes(stmt)
        except ValueError as e:
            raise self.refuse(name, str(e)) from None

    def check_name(self, m: tarfile.TarInfo) -> str:
        name = m.name
        if m.type not in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE):
            raise self.refuse(name, f"a {_TYPE_NAMES.get(m.type, f'type {m.type!r} member')}; only regular "
                                    "files and directories are allowed")
        if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
            raise self.refuse(name[:80] + "...", f"name longer than {MAX_NAME_BYTES} bytes")
        if name.count("/") >= MAX_PATH_DEPTH:
            raise self.refuse(name[:80] + "...", f"path deeper than {MAX_PATH_DEPTH} components")
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

    def mkdirs(self, name: str) -> None:
        """Create ``dest/name`` and its parents one component at a time (names are at most 32 deep)."""
        d = self.dest
        for part in name.split("/"):
            d = d / part
            if not d.is_dir():
                d.mkdir(mode=0o755)

    def write(self, name: str, src: IO[bytes], size: int, expected: str | None) -> None:
        """Copy ``size`` bytes to a temp file while hashing; rename it to ``name`` only when it matches."""
        dest = self.dest / name
        self.mkdirs(name.rsplit("/", 1)[0])
        tmp = self.dest / f".partial-{self.count}"
        h = hashlib.sha256()
        written = 0
        try:
            with open(tmp, "xb") as out:
                while written < size and (chunk := src.read(min(CHUNK, size - written))):
                    h.update(chunk)
                    out.write(chunk)
                    written += len(chunk)
            if written != size:
                raise self.refuse(name, f"truncated ({written} of {size} bytes)")
            if expected is not None and h.hexdigest() != expected:
                raise BundleError(f"{self.label}: {name.split('/', 1)[1]}: sha256 differs from the signed provenance "
                                  "(nothing of it was kept)", hint=_IMMUTABLE)
            tmp.chmod(0o644)
            if dest.exists():
                raise self.refuse(name, "a directory of that name already exists")
            tmp.rename(dest)
        finally:
            tmp.unlink(missing_ok=True)

    def finish(self) -> Path:
        if self.top is None:
            raise BundleError(f"{self.label}: empty archive")
        if self.check is not None and self.digests is None:
            raise BundleError(f"{self.label}: no {PROVENANCE} in the archive (the bundle was never signed?)")
        root = self.dest / self.top
        if not root.is_dir():
            raise BundleError(f"{self.label}: the top entry {self.top!r} is not a folder")
        return root
