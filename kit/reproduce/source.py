"""The source of a reproduction: a bundle directory or archive, verified under the user's policy into a private copy
that everything afterwards reads (nothing is read twice from where the user pointed, so nothing can change between
the check and the use).

An archive is extracted the way `kit verify ARCHIVE` does: its signed provenance first (signatures, subjects, the
trust decision), then only signed, size-bounded, hash-checked members. A directory is copied the same way: its
provenance first, checked in the copy, then only the files it signs, each bounded by its signed size (regular files
only, never through a link). Either way ``kit.bundle.verify.verify_directory`` then
checks every file, recomputes summary.json and re-checks the manifest signature. A signer the policy does not allow
for kit-bundle is refused (exit 9) unless ``allow_untrusted``; the choice is recorded in the source reference.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.bundle import MAX_MEMBERS, MAX_TOTAL_BYTES, PROVENANCE, BundleUntrusted, safe_extract
from kit.bundle.extract import Check, is_archive
from kit.bundle.names import walk
from kit.bundle.policy import decide_trust
from kit.bundle.subjects import file_problems, subject_sizes
from kit.bundle.verify import (
    MAX_PROVENANCE_BYTES,
    fail,
    signed_parts,
    signed_statement,
    signed_subjects,
    verify_directory,
)
from kit.errors import BundleError, UsageError
from kit.files.read import read_file
from kit.files.reproduce import SourceRef
from kit.files.run import RunFile
from kit.files.summary import Summary
from kit.plumbing.files import open_regular, read_chunks, sha256_file
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


def copy_signed(src: Path, dest: Path, label: str, check: Check) -> Path:
    """A bundle directory into the new private directory ``dest`` the way an archive is extracted: its provenance
    first, checked there (``check``: signatures, subjects, the trust decision), then only the files it signs, each
    no larger than its signed size (else what is left of MAX_TOTAL_BYTES). An extra or missing file is refused
    before any is copied, so a received directory costs its signed bytes at most, whatever it holds. Links and
    special files are refused (BundleError), also when one replaces a file while it is copied."""
    dirs, files = walk(src)
    if PROVENANCE not in files:  # never sealed: what kit verify says of it (a run that never ended, its checkpoints)
        signed_parts(src, label, "nothing vouches for an unsigned bundle")
    if len(files) + len(dirs) > MAX_MEMBERS:
        raise fail(label, [f"{len(files)} files and {len(dirs)} directories, more than the {MAX_MEMBERS} entries a "
                           "bundle kit reads may hold"])
    dest.mkdir()
    _copy(src, dest, PROVENANCE, MAX_PROVENANCE_BYTES, label)
    stmt = check(dest / PROVENANCE)  # before any directory is made or another file copied
    try:
        subjects, sizes = signed_subjects(stmt, label), subject_sizes(stmt)
    except ValueError as e:
        raise fail(label, [f"{PROVENANCE}: {e}"]) from None
    rest = sorted(f for f in files if f != PROVENANCE)
    if problems := file_problems(rest, subjects, subjects):  # extra or missing: the digests are checked later
        raise fail(label, problems, hint="a bundle is immutable once signed; get an untouched copy")
    for d in sorted(dirs):
        (dest / d).mkdir(parents=True, exist_ok=True)
    budget = MAX_TOTAL_BYTES
    for rel in rest:
        budget -= _copy(src, dest, rel, sizes.get(rel, budget), label)
    return dest


def _copy(src: Path, dest: Path, rel: str, limit: int, label: str) -> int:
    """Copy one regular file, refusing one of more than ``limit`` bytes; its size."""
    try:
        f = open_regular(src / rel, follow=False)  # a FIFO swapped in since the walk: refused, never waited on
    except OSError as e:
        raise BundleError(f"{src / rel}: {e.strerror or e}; a bundle holds only regular files",
                          hint="a file changed while kit copied the bundle: copy it again when nothing writes "
                          "it") from None
    size = 0
    with f, open(dest / rel, "xb") as out:
        for chunk in read_chunks(f, limit):
            size += len(chunk)
            if size > limit:
                raise fail(label, [f"{rel}: larger than its signed size ({limit} bytes)" if rel != PROVENANCE else
                                   f"{rel}: larger than {limit} bytes"],
                           hint="a bundle is immutable once signed; get an untouched copy")
            out.write(chunk)
    return size


def _untrusted_check(label: str, files: list[Path], allow_untrusted: bool, seen: dict[str, bool]) -> Check:
    """The provenance check (kit verify's): signatures and subjects, then the trust decision; an untrusted signer is
    refused before any other file is extracted or copied, unless allowed."""

    def decide(env: dict[str, Any], body: bytes) -> None:
        try:
            decide_trust(env, body, files, label)
            seen["trusted"] = True
        except BundleUntrusted as e:
            if not allow_untrusted:
                raise _refusal(e) from None
            seen["trusted"] = False

    return signed_statement(label, decide)


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
            root = copy_signed(target, tmp / (target.resolve().name or "bundle"), label,
                               _untrusted_check(label, files, allow_untrusted, seen))
        yield _verified(root, target, label, trust, allow_untrusted, seen["trusted"],
                        None if read is None else read.hexdigest())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _verified(root: Path, target: Path, label: str, trust: list[Path], allow_untrusted: bool,
              trusted: bool, archive_sha256: str | None) -> Source:
    """``kit.bundle.verify.verify_directory`` on the copy (an untrusted signer checked for integrity only, when
    allowed), then what identifies the source."""
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
