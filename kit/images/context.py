"""The build context and source facts: exactly what the builder sees, and when and where it came from.

The build context is sent as a tar that kit makes itself: the context directory (honouring its
``.dockerignore``; ``__pycache__`` and ``*.pyc`` are always left out) plus the repository paths
listed in its ``kit.include`` file, every entry owned by root with mode 0644/0755 and a fixed
mtime (SOURCE_DATE_EPOCH, else 1980-01-01). So ``context_sha256`` is the hash of exactly what
the builder saw, and COPY layers do not depend on checkout times.
"""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO

from docker.utils.build import PatternMatcher

from kit.errors import ImageBuildError, ManifestError
from kit.manifest import LoadedManifest
from kit.plumbing.files import TooLarge, open_regular, read_bounded, sha256_file

INCLUDE_FILE = "kit.include"
ALWAYS_EXCLUDE = ("**/__pycache__", "**/*.pyc", "**/.git")
FALLBACK_EPOCH = 315532800  # 1980-01-01T00:00:00Z, when neither SOURCE_DATE_EPOCH nor git gives a time
MAX_LIST_BYTES = 1 << 20  # a .dockerignore or kit.include: a list of patterns or paths


# --------------------------------------------------------------------------- the build context


@dataclass(frozen=True)
class Context:
    """The files sent to the builder: (path in the context, file on disk), sorted."""

    files: tuple[tuple[str, Path], ...]
    sha256: str
    dockerfile_sha256: str
    entries: tuple[tuple[str, str], ...] = ()  # (context path, "<mode> <digest>"): what ``sha256`` is over

    def file_entries(self) -> dict[str, str]:
        return dict(self.entries)


def file_digest(path: Path) -> str:
    """A context file's identity: ``link:<target>`` for a symlink, else its sha256 hex digest (a FIFO, device or
    directory: ImageBuildError, never waited on)."""
    if path.is_symlink():
        return "link:" + os.readlink(path)
    try:
        return sha256_file(path)[0]
    except OSError as e:
        raise _unsendable(path, e.strerror or str(e).removeprefix(f"{path}: ")) from None


def _unsendable(path: Path, why: str) -> ImageBuildError:
    return ImageBuildError(f"{path}: cannot be sent in the build context ({why})",
                           hint="the build context holds regular files, directories and symbolic links only: remove "
                                "it, or list it in the context's .dockerignore")


def _mode(path: Path) -> int:
    return 0o755 if path.stat().st_mode & 0o111 else 0o644


def _read_list(p: Path) -> list[str]:
    """The lines of a context's .dockerignore or kit.include ([] when there is none): UTF-8 text in a regular file
    of at most MAX_LIST_BYTES, else an ImageBuildError naming it."""
    try:
        data = read_bounded(p, MAX_LIST_BYTES)
    except FileNotFoundError:
        return []
    except (OSError, TooLarge) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e).removeprefix(f"{p}: ")
        raise ImageBuildError(f"{p}: cannot be read ({why})",
                              hint=f"make it a regular text file (at most {MAX_LIST_BYTES >> 20} MiB), or remove it"
                              ) from None
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ImageBuildError(f"{p}: not UTF-8 text (line {line}, byte {e.start})",
                              hint="it is a list of patterns or paths: save it as UTF-8") from None


def _dockerignore(context: Path) -> list[str]:
    lines = (line.strip() for line in _read_list(context / ".dockerignore"))
    return [line for line in lines if line and not line.startswith("#")]


def _walk(base: Path, prefix: str, matcher: PatternMatcher) -> dict[str, Path]:
    """Files (and symlinks) under ``base`` not excluded by ``matcher``, keyed by context path; ImageBuildError for
    anything else that is not excluded (a FIFO, socket or device)."""
    out: dict[str, Path] = {}
    paths = [base] if base.is_symlink() or not base.is_dir() else sorted(base.rglob("*"))
    for p in paths:
        mode = p.lstat().st_mode
        if stat.S_ISDIR(mode):
            continue
        rel = str(PurePosixPath(prefix) / p.relative_to(base).as_posix()) if p != base else prefix
        rel = rel.removeprefix("./")
        if matcher.matches(rel):
            continue
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise _unsendable(p, f"not a regular file ({stat.filemode(mode)})")
        out[rel] = p
    return out


def _includes(root: Path, context: Path) -> list[str]:
    """Repository paths listed in the context's kit.include, checked to stay inside the repository."""
    p = context / INCLUDE_FILE
    out = []
    for n, line in enumerate(_read_list(p), 1):
        item = line.split("#", 1)[0].strip().rstrip("/")
        if not item:
            continue
        target = (root / item).resolve()
        if PurePosixPath(item).is_absolute() or ".." in PurePosixPath(item).parts or not target.is_relative_to(root):
            raise ImageBuildError(f"{p}: line {n}: {item!r} is not a path inside the repository")
        if not target.exists():
            raise ImageBuildError(f"{p}: line {n}: {item!r} does not exist under {root}")
        out.append(item)
    return out


def _check_dockerfile(p: Path) -> None:
    """ImageBuildError unless ``p`` is (or links to) a regular file, saying what it is instead: a FIFO, device or
    directory is never opened, so never waited on."""
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise ImageBuildError(f"{p}: no such Dockerfile",
                              hint="create it, or name the context's Dockerfile in image.dockerfile") from None
    except OSError as e:
        raise ImageBuildError(f"{p}: cannot read the Dockerfile ({e.strerror or e})",
                              hint="make it a regular file") from None
    if not stat.S_ISREG(mode):
        what = "a directory" if stat.S_ISDIR(mode) else f"not a regular file ({stat.filemode(mode)})"
        raise ImageBuildError(f"{p}: the Dockerfile is {what}",
                              hint="make it a regular file holding the build's instructions (a FIFO, device or "
                                   "directory is never read), or name another in the arm's image.dockerfile")


def collect_context(root: Path, context: Path, dockerfile: str) -> Context:
    """Every file the build sees: the context directory plus kit.include paths, minus exclusions."""
    root = root.resolve()
    _check_dockerfile(context / dockerfile)
    matcher = PatternMatcher([*_dockerignore(context), *ALWAYS_EXCLUDE, f"!{dockerfile}"])
    files = _walk(context, ".", matcher)
    for item in _includes(root, context):
        extra = _walk(root / item, item, matcher)
        clash = sorted(set(extra) & set(files))
        if clash:
            raise ImageBuildError(f"{context / INCLUDE_FILE}: {item!r} would overwrite {clash[:3]} in the context")
        files.update(extra)
    ordered = tuple(sorted(files.items()))
    h = hashlib.sha256()
    entries = []
    for rel, p in ordered:
        mode, digest = f"{_mode(p) if not p.is_symlink() else 0o777:o}", file_digest(p)
        h.update(f"{rel}\0{mode}\0{digest}\n".encode())
        entries.append((rel, f"{mode} {digest}"))
    return Context(files=ordered, sha256=h.hexdigest(), dockerfile_sha256=file_digest(context / dockerfile),
                   entries=tuple(entries))


def context_subject(arm: str, context: str) -> str:
    """The name of an arm's image context among a manifest signature's subjects."""
    return f"context:{arm}:{context}"


def image_contexts(lm: LoadedManifest) -> dict[str, tuple[str, dict[str, str]]]:
    """Every arm's image context as a signature subject: ``{context:<arm>:<context>: (sha256, {file: entry})}``,
    collected exactly as the build collects it (same root, same files, same digest). A context must stay
    inside the project root, symlinks resolved (ManifestError, exit 3, naming the field)."""
    root = lm.project_root
    real_root = root.resolve()
    out: dict[str, tuple[str, dict[str, str]]] = {}
    for i, arm in enumerate(lm.manifest.arms):
        if arm.image is None:
            continue
        field = f"arms[{i}].image.context"
        context_dir = root / arm.image.context
        real = context_dir.resolve()
        if not real.is_relative_to(real_root):
            raise ManifestError(f"{lm.path}: {field}: {arm.image.context!r} resolves to {real}, outside the "
                                f"project root {real_root}",
                                hint="keep image contexts inside the project; no symlink may lead out of it")
        if not real.is_dir():
            raise ManifestError(f"{lm.path}: {field}: {arm.image.context!r} is not a directory under {real_root}",
                                hint="create the build context or fix the path")
        ctx = collect_context(root, context_dir, arm.image.dockerfile)
        out[context_subject(arm.name, arm.image.context)] = (ctx.sha256, ctx.file_entries())
    return out


def write_context_tar(ctx: Context, out: IO[bytes], mtime: int) -> None:
    """A deterministic tar of the context: sorted, root-owned, fixed modes and mtime."""
    dirs = sorted({str(parent) for rel, _ in ctx.files for parent in PurePosixPath(rel).parents if str(parent) != "."})
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o755, mtime))
        for rel, p in ctx.files:
            if p.is_symlink():
                info = _info(rel, tarfile.SYMTYPE, 0o777, mtime)
                info.linkname = os.readlink(p)
                tar.addfile(info)
                continue
            info = _info(rel, tarfile.REGTYPE, _mode(p), mtime)
            info.size = p.stat().st_size
            with open_regular(p, follow=False) as f:  # what collect_context hashed: a regular file, not a link
                tar.addfile(info, f)


def _info(name: str, kind: bytes, mode: int, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


# --------------------------------------------------------------------------- provenance facts


def _git(root: Path, *args: str) -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if r.returncode != 0:
        return None
    return r.stdout.strip() or None


@dataclass(frozen=True)
class SourceFacts:
    revision: str | None
    source: str | None
    epoch: int  # for org.opencontainers.image.created
    epoch_from: str  # SOURCE_DATE_EPOCH | git | fixed


def source_facts(root: Path) -> SourceFacts:
    """Revision and repository URL from git; the creation time from SOURCE_DATE_EPOCH, else the
    commit time of HEAD, else 1980-01-01 (never the wall clock, which would change every build)."""
    revision = _git(root, "rev-parse", "HEAD")
    source = _git(root, "remote", "get-url", "origin")
    sde = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if sde.isdigit():
        return SourceFacts(revision, source, int(sde), "SOURCE_DATE_EPOCH")
    ct = _git(root, "log", "-1", "--format=%ct")
    if ct and ct.isdigit():
        return SourceFacts(revision, source, int(ct), "git")
    return SourceFacts(revision, source, FALLBACK_EPOCH, "fixed")


def layer_mtime() -> int:
    sde = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    return int(sde) if sde.isdigit() else FALLBACK_EPOCH


def iso_utc(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
