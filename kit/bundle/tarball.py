"""Deterministic .tar.gz archives of bundles, and extraction of untrusted ones by whitelist.

Archive bytes depend only on the bundle's names and contents: entries sorted by the UTF-8 bytes
of their paths under one top folder (the bundle directory's name), uid/gid 0, empty user and
group names, modes 0644/0755, mtime 0 (not SOURCE_DATE_EPOCH: the same bundle must give the same
bytes on every machine and every day), PAX format, gzip level 9 with header mtime 0 and no file
name. The identity of a bundle stays its signed per-file sha256 list; the archive's sha256 is a
transport checksum (another zlib build could compress differently).

``provenance.dsse.json`` is the first file (right after the top folder), so that a reader can verify
the signed file list before it writes any other member (``kit.bundle.extract``, which this module
re-exports for its callers).

Only what the receiver's `kit verify` would accept byte for byte is archived: the provenance must parse and its
signatures verify (trust is the receiver's decision, not judged here), the files must be exactly its signed
subjects (no extra, none missing), and each file's bytes, hashed as they are written, its signed sha256; anything
else is refused (exit 9) and nothing is written. The output must be named .tar.gz or .tgz (any case): the name is
what other tools, and people, go by.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shlex
import stat
import tarfile
from pathlib import Path
from typing import IO

from kit.bundle.dirlock import shared
from kit.bundle.extract import ARCHIVE_SUFFIXES, MAX_MEMBERS, MAX_TOTAL_BYTES, archive_name, extracted, safe_extract
from kit.bundle.names import PROVENANCE, check_component, walk
from kit.bundle.subjects import file_problems
from kit.bundle.verify import fail, signed_parts
from kit.errors import BundleError, UsageError
from kit.plumbing.files import NOFOLLOW, atomic_writer, sha256_file
from kit.plumbing.tarinfo import normal_tarinfo

__all__ = ["MAX_MEMBERS", "MAX_TOTAL_BYTES", "archive", "archive_sha256", "extracted", "safe_extract"]

MTIME = 0
COMPRESSLEVEL = 9


# --------------------------------------------------------------------------- writing


def archive(bundle_dir: Path, out: Path) -> str:
    """Write a deterministic .tar.gz of ``bundle_dir`` to ``out`` (atomically); return its sha256 hex.

    Refuses symlinks and special files in the bundle, an ``out`` inside the bundle or not named .tar.gz/.tgz, and
    a bundle whose files are not exactly what its provenance signed (BundleError, exit 9; nothing written).
    """
    if not archive_name(out):
        better = out.with_name(out.name + (".gz" if out.name.lower().endswith(".tar") else ".tar.gz"))
        raise UsageError(f"{out}: an archive's name ends in {' or '.join(ARCHIVE_SUFFIXES)}; kit writes a gzip "
                         "compressed tar, and a name that says otherwise misleads whoever receives it",
                         hint=f"name it so, e.g. -o {better}")
    if not bundle_dir.is_dir():
        raise UsageError(f"{bundle_dir}: not a bundle directory")
    root = bundle_dir.resolve()
    top = check_component(root.name, "bundle directory name")
    if out.resolve().is_relative_to(root):
        raise UsageError(f"{out}: the archive cannot be written inside the bundle it archives")
    with shared(root) as free:  # a kit run or resume writing it meanwhile would be archived half-written
        if not free:
            raise UsageError(f"{root} is in use by another kit process (a run or resume is writing it)",
                             hint="archive it when that run has ended")
        if not (root / PROVENANCE).is_file() or (root / PROVENANCE).is_symlink():
            raise BundleError(f"{bundle_dir}: not sealed (no {PROVENANCE}): its run never ended, so nothing signed "
                              "covers its files and the archive would not verify",
                              hint=f"finish it first (`kit verify {shlex.quote(str(bundle_dir))}` prints the command "
                              "that does, or says why its checkpoints cannot), then archive it")
        label = str(bundle_dir)
        subjects = signed_parts(root, label, "").subjects  # the envelope as kit writes it, every signature valid
        dirs, files = walk(root)
        signed = sorted(f for f in files if f != PROVENANCE)
        if problems := file_problems(signed, subjects, {rel: subjects[rel] for rel in signed if rel in subjects}):
            raise _not_as_signed(label, problems, out)  # an extra or a missing file: before anything is written
        # provenance first (a reader verifies the signed list before anything else), then sorted UTF-8 bytes
        entries = sorted([(d, True) for d in dirs] + [(f, False) for f in files],
                         key=lambda e: (e[0] != PROVENANCE, e[0].encode()))
        with atomic_writer(out) as raw:  # streamed (an archive can be large), renamed over ``out`` when complete
            digests = _write_tar_gz(raw, root, top, entries)
            if problems := file_problems(signed, subjects, digests):  # the bytes written: removed, never renamed
                raise _not_as_signed(label, problems, out)
    return archive_sha256(out)


def _not_as_signed(label: str, problems: list[str], out: Path) -> BundleError:
    err = fail(label, problems, hint="a sealed bundle is immutable and the receiver's `kit verify` would refuse this "
               "archive (exit 9): make the bundle what its provenance signed again (remove a file it does not name; "
               "restore a changed or missing one from an untouched copy of the bundle), then archive it; `kit verify "
               f"{shlex.quote(label)}` checks it first")
    err.note(f"kit archive writes only a bundle whose files are exactly what its provenance signed: nothing was "
             f"written to {out}")
    return err


def _write_tar_gz(raw: IO[bytes], root: Path, top: str, entries: list[tuple[str, bool]]) -> dict[str, str]:
    """Write the archive; return the sha256 of every file's bytes as written."""
    digests = {}
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
                hashed = _Hashing(f)
                tf.addfile(_info(f"{top}/{rel}", is_dir=False, size=st.st_size), hashed)
                digests[rel] = hashed.sha256.hexdigest()
    return digests


class _Hashing:
    """A file read through, hashing the bytes tarfile copies into the archive."""

    def __init__(self, f: IO[bytes]) -> None:
        self.f, self.sha256 = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.sha256.update(data)
        return data


def _info(name: str, *, is_dir: bool, size: int) -> tarfile.TarInfo:
    if is_dir:
        return normal_tarinfo(name, tarfile.DIRTYPE, 0o755, mtime=MTIME)
    return normal_tarinfo(name, tarfile.REGTYPE, 0o644, mtime=MTIME, size=size)


def archive_sha256(path: Path) -> str:
    return sha256_file(path.resolve())[0]  # the archive may be reached through a link
