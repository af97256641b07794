"""The source of a reproduction: a bundle directory or archive, verified under the user's policy into a private copy
that everything afterwards reads (nothing is read twice from where the user pointed, so nothing can change between
the check and the use).

An archive is extracted the way `kit verify ARCHIVE` does: its signed provenance first (signatures, subjects, the
trust decision), then only signed, size-bounded, hash-checked members. A directory is copied file by file (regular
files only, never through a link), and the copy is verified. Either way ``kit.bundle.verify.verify_directory`` then
checks every file, recomputes summary.json and re-checks the manifest signature. A signer the policy does not allow
for kit-bundle is refused (exit 9) unless ``allow_untrusted``; the choice is recorded in the source reference.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.bundle import PROVENANCE, BundleUntrusted, safe_extract
from kit.bundle.extract import Check, is_archive
from kit.bundle.names import walk
from kit.bundle.policy import decide_trust
from kit.bundle.verify import check_signatures, read_envelope, signed_subjects, verify_directory
from kit.errors import BundleError, UsageError
from kit.files.read import read_file
from kit.files.reproduce import SourceRef
from kit.files.run import RunFile
from kit.files.summary import Summary
from kit.plumbing.files import CHUNK, NOFOLLOW, sha256_file
from kit.reproduce.looks import check_reproduce_looks
from kit.signing import policy_files

CHECKS = (check_reproduce_looks,)  # a source that is itself a reproduction stopped by its looks: recomputed too


@dataclass(frozen=True)
class Source:
    """A verified private copy of the source bundle (``root``), what identifies it, and kit verify's lines."""

    root: Path
    ref: SourceRef
    lines: list[str]
    run: RunFile
    summary: Summary

    def read_bytes(self, rel: str) -> bytes | None:
        p = self.root / rel
        return p.read_bytes() if p.is_file() else None


def copy_tree(src: Path, dest: Path) -> Path:
    """Copy the regular files and directories under ``src`` into the new directory ``dest``; refuse links and
    special files (BundleError), also when one replaces a file while it is copied."""
    dirs, files = walk(src)
    dest.mkdir()
    for d in sorted(dirs):
        (dest / d).mkdir(parents=True, exist_ok=True)
    for rel in files:
        fd = os.open(src / rel, os.O_RDONLY | NOFOLLOW)
        with os.fdopen(fd, "rb") as f, open(dest / rel, "xb") as out:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise BundleError(f"{src / rel}: not a regular file; a bundle holds only regular files")
            while chunk := f.read(CHUNK):
                out.write(chunk)
    return dest


def _untrusted_check(label: str, files: list[Path], allow_untrusted: bool, seen: dict[str, bool]) -> Check:
    """The archive's provenance check (kit verify's): signatures and subjects, then the trust decision; an untrusted
    signer is refused before any other member is extracted, unless allowed."""

    def check(provenance: Path) -> Mapping[str, Any]:
        env, body, stmt = read_envelope(provenance, label)
        signed_subjects(stmt, label)
        check_signatures(env, body, stmt, label)
        try:
            decide_trust(env, body, files, label)
            seen["trusted"] = True
        except BundleUntrusted as e:
            if not allow_untrusted:
                raise _refusal(e) from None
            seen["trusted"] = False
        return stmt

    return check


def _refusal(e: BundleUntrusted) -> BundleUntrusted:
    return e.note("kit reproduce re-runs only bundles whose runner your policy trusts; to reproduce it anyway, "
                  "pass --allow-untrusted-source (recorded in the new bundle)")  # type: ignore[return-value]


@contextmanager
def opened(target: Path, trust: list[Path], *, allow_untrusted: bool) -> Iterator[Source]:
    """Verify ``target`` into a private temp copy; yield it; always remove the copy."""
    if not target.exists():
        raise UsageError(f"{target}: no such file or directory",
                         hint="give a bundle directory or a bundle archive (.tar.gz) made by `kit archive`")
    is_dir = target.is_dir()
    if not is_dir and not is_archive(target):  # an archive by its name or its bytes (gzip), whatever it is called
        raise UsageError(f"{target}: neither a bundle directory nor a bundle archive (a gzip file, as `kit archive` "
                         "writes)")
    if not is_dir and not target.is_file():  # a FIFO would block the open; a device never ends
        raise BundleError(f"{target}: not a regular file, so not an archive kit reads",
                          hint="give the .tar.gz file `kit archive` wrote")
    label = str(target)
    files = policy_files(trust)
    tmp = Path(tempfile.mkdtemp(prefix="kit-reproduce-"))
    try:
        seen: dict[str, bool] = {}
        read = None if is_dir else hashlib.sha256()  # an archive: the bytes verified, read once
        if read is not None:
            (tmp / "x").mkdir()
            root = safe_extract(target, tmp / "x", check=_untrusted_check(label, files, allow_untrusted, seen),
                                sha256=read)
        else:
            root = copy_tree(target, tmp / (target.resolve().name or "bundle"))
        yield _verified(root, target, label, trust, allow_untrusted, seen.get("trusted"),
                        None if read is None else read.hexdigest())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _verified(root: Path, target: Path, label: str, trust: list[Path], allow_untrusted: bool,
              trusted: bool | None, archive_sha256: str | None) -> Source:
    """``kit.bundle.verify.verify_directory`` on the copy (an untrusted signer checked for integrity only, when
    allowed), then what identifies the source."""
    if trusted is None:  # a directory: the whole verification, trust decision included
        try:
            res = verify_directory(root, trust, label=label, checks=CHECKS)
            trusted = True
        except BundleUntrusted as e:
            if not allow_untrusted:
                raise _refusal(e) from None
            trusted = False
            res = verify_directory(root, trust, label=label, integrity_only=True, checks=CHECKS)
    else:
        res = verify_directory(root, trust, label=label, integrity_only=not trusted, checks=CHECKS)
    lines = res.summary.splitlines()
    signer = str(res.details.get("verdict", lines[0] if lines else ""))
    if not trusted:
        who = ", ".join(f"{s.get('fingerprint')} (key comment {s.get('comment')!r})"
                        for s in res.details.get("signers") or [] if isinstance(s, dict))  # type: ignore[attr-defined]
        signer = f"UNTRUSTED (your policy does not allow its signer for kit-bundle; accepted with " \
                 f"--allow-untrusted-source): signed by {who}"
        lines[0] = signer
    run = read_file(root, "run.json", RunFile)
    if not (root / "summary.json").is_file():
        raise BundleError(f"{label}: has no summary.json, so nothing to compare a reproduction with",
                          hint="`kit report` on the original bundle recomputes it from the records")
    summary = read_file(root, "summary.json", Summary)
    if not (root / "manifest.yaml").is_file():
        raise BundleError(f"{label}: has no manifest.yaml to re-run")
    ref = SourceRef(
        path=str(target), kind="directory" if archive_sha256 is None else "archive", top=root.name,
        provenance_sha256=sha256_file(root / PROVENANCE)[0],
        archive_sha256=archive_sha256,
        run_id=run.run_id, experiment=run.experiment or summary.experiment,
        manifest_sha256=sha256_file(root / "manifest.yaml")[0],
        signer=signer, trusted=trusted, allow_untrusted_source=allow_untrusted)
    return Source(root=root, ref=ref, lines=lines, run=run, summary=summary)
