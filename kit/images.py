"""Building and identifying the arms' images, and pinning their bases (`kit lock`).

Every arm with an ``image`` is built through the Docker SDK's low-level streaming build (the
classic builder: no BuildKit syntax), never pulling: a base that is not on this machine is an
error that says how to get it. Build errors arrive as items of the stream, not as exceptions,
and are turned into ImageBuildError (exit 6) with the last log lines.

The build context is sent as a tar that kit makes itself: the context directory (honouring its
``.dockerignore``; ``__pycache__`` and ``*.pyc`` are always left out) plus the repository paths
listed in its ``kit.include`` file, every entry owned by root with mode 0644/0755 and a fixed
mtime (SOURCE_DATE_EPOCH, else 1980-01-01). So ``context_sha256`` is the hash of exactly what
the builder saw, and COPY layers do not depend on checkout times.

Identity: ``image_id`` is the config digest on the classic image store (on the containerd store
it is the manifest digest; both stores are recorded by ``kit.runtime.docker.engine_facts``).
Local builds have no repo digest; the base's RepoDigests and image ID are recorded too.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import IO, Any

import requests
from docker.errors import APIError, DockerException, ImageNotFound
from docker.utils.build import PatternMatcher

from kit import safeyaml
from kit.errors import ImageBuildError
from kit.manifest import PINNED_RE, Arm, ImageSpec, LoadedManifest, load_manifest, read_bytes
from kit.plumbing.files import sha256_file
from kit.runtime.docker import MANAGED_LABEL, connect, explanation

INCLUDE_FILE = "kit.include"
ALWAYS_EXCLUDE = ("**/__pycache__", "**/*.pyc", "**/.git")
FALLBACK_EPOCH = 315532800  # 1980-01-01T00:00:00Z, when neither SOURCE_DATE_EPOCH nor git gives a time
ZERO_DIGEST = "sha256:" + "0" * 64
OCI = "org.opencontainers.image"


@dataclass(frozen=True)
class ImageInfo:
    """What identifies one arm's built image (written to the bundle's images.json)."""

    arm: str
    tag: str
    image_id: str  # config digest (classic store)
    reference: str  # the base as pinned in the manifest, or the base arm's tag
    base_image_id: str
    base_repo_digests: list[str]
    base_arm: str | None
    base_pinned: bool
    allow_unpinned: bool
    context: str
    dockerfile: str
    dockerfile_sha256: str
    context_sha256: str
    context_files: int
    recipe_sha256: str
    build_args: dict[str, str]
    labels: dict[str, str]
    diff_ids: list[str]
    os: str
    architecture: str
    repo_digests: list[str]
    build_log: str
    build_log_sha256: str
    build_s: float
    cached_steps: int = 0
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- the build context


@dataclass(frozen=True)
class Context:
    """The files sent to the builder: (path in the context, file on disk), sorted."""

    files: tuple[tuple[str, Path], ...]
    sha256: str
    dockerfile_sha256: str


def _file_digest(path: Path) -> str:
    """A context file's identity: ``link:<target>`` for a symlink, else its sha256 hex digest."""
    if path.is_symlink():
        return "link:" + os.readlink(path)
    return sha256_file(path)[0]


def _mode(path: Path) -> int:
    return 0o755 if path.stat().st_mode & 0o111 else 0o644


def _dockerignore(context: Path) -> list[str]:
    p = context / ".dockerignore"
    if not p.is_file():
        return []
    lines = (line.strip() for line in p.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _walk(base: Path, prefix: str, matcher: PatternMatcher) -> dict[str, Path]:
    """Files (and symlinks) under ``base`` not excluded by ``matcher``, keyed by context path."""
    out: dict[str, Path] = {}
    paths = [base] if base.is_file() or base.is_symlink() else sorted(base.rglob("*"))
    for p in paths:
        if p.is_dir() and not p.is_symlink():
            continue
        rel = str(PurePosixPath(prefix) / p.relative_to(base).as_posix()) if p != base else prefix
        rel = rel.removeprefix("./")
        if not matcher.matches(rel):
            out[rel] = p
    return out


def _includes(root: Path, context: Path) -> list[str]:
    """Repository paths listed in the context's kit.include, checked to stay inside the repository."""
    p = context / INCLUDE_FILE
    if not p.is_file():
        return []
    out = []
    for n, line in enumerate(p.read_text().splitlines(), 1):
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


def collect_context(root: Path, context: Path, dockerfile: str) -> Context:
    """Every file the build sees: the context directory plus kit.include paths, minus exclusions."""
    root = root.resolve()
    if not (context / dockerfile).is_file():
        raise ImageBuildError(f"{context / dockerfile}: no such Dockerfile")
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
    for rel, p in ordered:
        h.update(f"{rel}\0{_mode(p) if not p.is_symlink() else 0o777:o}\0{_file_digest(p)}\n".encode())
    return Context(files=ordered, sha256=h.hexdigest(), dockerfile_sha256=_file_digest(context / dockerfile))


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
            with p.open("rb") as f:
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


def _layer_mtime() -> int:
    sde = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    return int(sde) if sde.isdigit() else FALLBACK_EPOCH


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def repo_name(experiment: str, arm: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", f"{experiment}-{arm}".lower()).strip("-")
    return f"kit/{name}"


# --------------------------------------------------------------------------- bases


@dataclass(frozen=True)
class Base:
    reference: str  # as written (or the base arm's tag)
    image_id: str
    repo_digests: list[str]
    digest: str  # the pinned digest, or the local image ID
    pinned: bool
    arm: str | None = None


def _placeholder(ref: str) -> bool:
    return ref.endswith(ZERO_DIGEST)


def check_base(lm: LoadedManifest, arm: Arm, *, allow_unpinned: bool) -> bool:
    """Refuse the all-zeros placeholder, and an unpinned base unless allowed; return whether it is pinned."""
    assert arm.image is not None and arm.image.base is not None
    ref = arm.image.base
    if _placeholder(ref):
        raise ImageBuildError(
            f"arm {arm.name}: base {ref} carries the placeholder digest (all zeros), not a real one",
            hint=f"run `kit lock {lm.path}` where a registry is reachable, then sign the manifest again",
        )
    pinned = bool(PINNED_RE.match(ref))
    if not pinned and not allow_unpinned:
        raise ImageBuildError(
            f"arm {arm.name}: base {ref} is not pinned by digest",
            hint=f"`kit lock {lm.path}` pins it where a registry is reachable; or pass --allow-unpinned (recorded)",
        )
    return pinned


def resolve_base(client: Any, lm: LoadedManifest, arm: Arm, *, allow_unpinned: bool) -> Base:
    """The local image behind a manifest base: refuse placeholders, unpinned (unless allowed) and absent."""
    pinned = check_base(lm, arm, allow_unpinned=allow_unpinned)
    assert arm.image is not None and arm.image.base is not None
    ref = arm.image.base
    try:
        img = client.images.get(ref)
    except ImageNotFound:
        raise ImageBuildError(
            f"arm {arm.name}: base image {ref} is not on this machine (kit never pulls during a build)",
            hint=f"where a registry is reachable: `docker pull {ref}` (`kit lock` pins tags first); "
            "offline: `docker save` it on a machine that has it and `docker load -i FILE` here",
        ) from None
    except (APIError, requests.RequestException) as e:
        raise ImageBuildError(f"arm {arm.name}: cannot inspect base image {ref}: {explanation(e)}") from None
    digest = ref.rsplit("@", 1)[1] if "@" in ref else (ref if ref.startswith("sha256:") else str(img.id))
    return Base(ref, str(img.id), list(img.attrs.get("RepoDigests") or []), digest, pinned)


# --------------------------------------------------------------------------- building


def _build_order(arms: list[Arm]) -> list[Arm]:
    with_image = [a for a in arms if a.image is not None]
    return [a for a in with_image if a.image and a.image.base] + [a for a in with_image if a.image and a.image.base_arm]


def build_images(
    lm: LoadedManifest, *, run_id: str, log_dir: Path, allow_unpinned: bool, client: Any | None = None
) -> dict[str, ImageInfo]:
    """Build every arm's image (bases first, then arms built FROM another arm's fresh image).

    ``run_id`` is only written into the build logs: image labels and tags depend on the recipe, not
    the run, so a second run with the same recipe reuses the builder's cache.
    """
    m = lm.manifest
    arms = _build_order(m.arms)
    if not arms:
        return {}
    for arm in arms:
        if arm.image is not None and arm.image.base is not None:
            check_base(lm, arm, allow_unpinned=allow_unpinned)
    client = connect(client, error=ImageBuildError)
    log_dir.mkdir(parents=True, exist_ok=True)
    facts = source_facts(lm.project_root)
    out: dict[str, ImageInfo] = {}
    for arm in arms:
        assert arm.image is not None
        if arm.image.base_arm is not None:
            parent = out[arm.image.base_arm]
            base = Base(parent.tag, parent.image_id, [], parent.image_id, True, arm=parent.arm)
        else:
            base = resolve_base(client, lm, arm, allow_unpinned=allow_unpinned)
        out[arm.name] = build_one(client, lm, arm, base, facts=facts, run_id=run_id, log_dir=log_dir,
                                  allow_unpinned=allow_unpinned)
    return out


def image_labels(lm: LoadedManifest, arm: str, base: Base, ctx: Context, recipe: str, tag: str,
                 facts: SourceFacts) -> dict[str, str]:
    """OCI labels (created from SOURCE_DATE_EPOCH or the commit time, never the clock) and kit.* labels."""
    description = " ".join(lm.manifest.arm(arm).description.split())
    labels = {
        f"{OCI}.title": tag.split(":", 1)[0],
        f"{OCI}.description": description or f"kit experiment {lm.manifest.name}, arm {arm}",
        f"{OCI}.created": _iso(facts.epoch),
        f"{OCI}.version": tag.rsplit(":", 1)[1],
        f"{OCI}.base.name": base.reference,
        f"{OCI}.base.digest": base.digest,
        MANAGED_LABEL: "1",
        "kit.experiment": lm.manifest.name,
        "kit.arm": arm,
        "kit.manifest_sha256": hashlib.sha256(lm.raw).hexdigest(),
        "kit.context_sha256": ctx.sha256,
        "kit.recipe_sha256": recipe,
    }
    if facts.source:
        labels[f"{OCI}.source"] = facts.source
    if facts.revision:
        labels[f"{OCI}.revision"] = facts.revision
    if not base.pinned:
        labels["kit.unpinned_base"] = "1"
    return labels


def build_one(client: Any, lm: LoadedManifest, arm: Arm, base: Base, *, facts: SourceFacts, run_id: str,
              log_dir: Path, allow_unpinned: bool) -> ImageInfo:
    spec: ImageSpec | None = arm.image
    assert spec is not None
    context_dir = lm.project_root / spec.context
    if not context_dir.is_dir():
        raise ImageBuildError(f"arm {arm.name}: build context {spec.context} is not a directory under "
                              f"{lm.project_root}")
    ctx = collect_context(lm.project_root, context_dir, spec.dockerfile)
    build_args = {**spec.build_args, "BASE_IMAGE": base.image_id}
    recipe = hashlib.sha256(json.dumps({"context": ctx.sha256, "dockerfile": spec.dockerfile,
                                        "build_args": build_args}, sort_keys=True).encode()).hexdigest()
    tag = f"{repo_name(lm.manifest.name, arm.name)}:{recipe[:12]}"
    labels = image_labels(lm, arm.name, base, ctx, recipe, tag, facts)
    log_path = log_dir / f"{arm.name}.build.log"
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as tar, log_path.open("w", encoding="utf-8") as log:
        write_context_tar(ctx, tar, _layer_mtime())
        tar.seek(0)
        log.write(f"# kit build of arm {arm.name} for run {run_id}: {tag}\n# base {base.reference} "
                  f"({base.image_id})\n# context {spec.context} sha256 {ctx.sha256} ({len(ctx.files)} files)\n")
        image_id, cached = _stream_build(client, arm.name, tar, spec.dockerfile, tag, build_args, labels, log,
                                         log_path)
    build_s = time.monotonic() - t0
    try:
        img = client.images.get(image_id)
    except (APIError, requests.RequestException) as e:
        raise ImageBuildError(f"arm {arm.name}: built {image_id} but cannot inspect it: {explanation(e)}") from None
    attrs = img.attrs
    return ImageInfo(
        arm=arm.name,
        tag=tag,
        image_id=str(img.id),
        reference=base.reference,
        base_image_id=base.image_id,
        base_repo_digests=base.repo_digests,
        base_arm=base.arm,
        base_pinned=base.pinned,
        allow_unpinned=allow_unpinned,
        context=spec.context,
        dockerfile=spec.dockerfile,
        dockerfile_sha256=ctx.dockerfile_sha256,
        context_sha256=ctx.sha256,
        context_files=len(ctx.files),
        recipe_sha256=recipe,
        build_args=build_args,
        labels=dict((attrs.get("Config") or {}).get("Labels") or {}),
        diff_ids=list((attrs.get("RootFS") or {}).get("Layers") or []),
        os=str(attrs.get("Os", "")),
        architecture=str(attrs.get("Architecture", "")),
        repo_digests=list(attrs.get("RepoDigests") or []),
        build_log=str(log_path),
        build_log_sha256=_file_digest(log_path),
        build_s=round(build_s, 3),
        cached_steps=cached,
        warnings=[] if base.pinned else [f"base {base.reference} is not pinned by digest (--allow-unpinned)"],
    )


def _stream_build(client: Any, arm: str, tar: IO[bytes], dockerfile: str, tag: str, build_args: dict[str, str],
                  labels: dict[str, str], log: IO[str], log_path: Path) -> tuple[str, int]:
    """Run the build, copying its stream to the log; return (image ID, cached steps)."""
    image_id: str | None = None
    error: str | None = None
    cached = 0
    try:
        stream = client.api.build(
            fileobj=tar, custom_context=True, dockerfile=dockerfile, tag=tag, buildargs=build_args, labels=labels,
            pull=False, rm=True, forcerm=True, decode=True, use_config_proxy=False,
        )
        for item in stream:
            if "stream" in item:
                text = str(item["stream"])
                cached += text.count("Using cache")
                log.write(text)
            elif "error" in item:
                error = str(item.get("errorDetail", {}).get("message") or item["error"])
                log.write(f"ERROR: {error}\n")
            elif "aux" in item and isinstance(item["aux"], dict) and "ID" in item["aux"]:
                image_id = str(item["aux"]["ID"])
            elif "status" in item:
                log.write(f"{item['status']} {item.get('progress', '')}\n")
            log.flush()
    except (APIError, DockerException, requests.RequestException) as e:
        error = explanation(e)
        log.write(f"ERROR: {error}\n")
    log.flush()
    if error is None and image_id is None:
        error = "the build stream ended without an image ID"
    if error is not None:
        tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
        raise ImageBuildError(
            f"arm {arm}: image build failed: {error}\nlast build log lines:\n" + "\n".join(f"    {x}" for x in tail),
            hint=f"full build log: {log_path}",
        )
    assert image_id is not None
    return image_id, cached


# --------------------------------------------------------------------------- kit lock


@dataclass(frozen=True)
class LockChange:
    arm: str
    line: int
    old: str
    new: str

    def __str__(self) -> str:
        return f"arm {self.arm} (line {self.line}): {self.old} -> {self.new}"


def split_reference(ref: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of ``repo[:tag][@sha256:...]``."""
    name, _, digest = ref.partition("@")
    repo, tag = name, None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repo, _, tag = name.rpartition(":")
    return repo, tag, digest or None


def lock_manifest(path: Path, *, client: Any | None = None, update: bool = False) -> list[LockChange]:
    """Pin every tagged base to the digest the registry serves now, rewriting only those lines.

    Bases that are unpinned or carry the all-zeros placeholder are resolved; with ``update``, pinned
    tags are resolved again too. Comments and formatting are kept byte for byte. The manifest's
    signature no longer matches afterwards: sign it again. Fails with ImageBuildError (exit 6) when
    the engine cannot reach the registry.
    """
    raw = read_bytes(path)
    lm = load_manifest(path, raw, allow_unpinned=True)
    doc = safeyaml.load(raw)
    lines = raw.decode("utf-8").splitlines(keepends=True)
    changes: list[LockChange] = []
    for idx, arm in enumerate(lm.manifest.arms):
        ref = arm.image.base if arm.image else None
        if ref is None or ref.startswith("sha256:"):
            continue
        repo, tag, digest = split_reference(ref)
        if digest is not None and not _placeholder(ref) and not update:
            continue
        if tag is None and digest is not None:
            continue  # pinned without a tag: nothing to resolve
        name = f"{repo}:{tag or 'latest'}"
        client = connect(client, error=ImageBuildError)
        new = f"{name}@{_registry_digest(client, name)}"
        if new == ref:
            continue
        line = _replace_on_line(lines, doc.line_of(("arms", idx, "image", "base")), ref, new, path)
        changes.append(LockChange(arm.name, line, ref, new))
    if changes:
        text = "".join(lines)
        load_manifest(path, text.encode(), allow_unpinned=False)
        tmp = path.with_name(f".{path.name}.lock-tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    return changes


def _registry_digest(client: Any, name: str) -> str:
    try:
        data = client.images.get_registry_data(name)
    except (APIError, requests.RequestException) as e:
        raise ImageBuildError(
            f"cannot resolve {name} from its registry: {explanation(e)}",
            hint="`kit lock` needs a Docker engine that reaches the registry; run it where one does, "
            "or pin a local image by its ID (sha256:...) instead",
        ) from None
    digest = str(data.id)
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ImageBuildError(f"the registry answered {digest!r} for {name}, not a sha256 digest")
    return digest


def _replace_on_line(lines: list[str], line: int | None, old: str, new: str, path: Path) -> int:
    start = (line or 1) - 1
    for i in range(start, min(start + 3, len(lines))):
        if lines[i].count(old) == 1:
            lines[i] = lines[i].replace(old, new)
            return i + 1
    raise ImageBuildError(f"{path}: cannot find {old!r} on line {line} to rewrite it",
                          hint="edit the base by hand, then sign the manifest again")
