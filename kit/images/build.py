"""Building the arms' images through the Docker SDK's low-level streaming build.

Every arm with an ``image`` is built with the classic builder (no BuildKit syntax), never pulling: a
base that is not on this machine is an error that says how to get it. Build errors arrive as items of
the stream, not as exceptions, and are turned into ImageBuildError (exit 6) with the last log lines.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import requests
from docker.errors import APIError, DockerException

from kit.errors import ImageBuildError
from kit.images.context import (
    SourceFacts,
    collect_context,
    file_digest,
    layer_mtime,
    source_facts,
    write_context_tar,
)
from kit.images.identity import Base, ImageInfo, check_base, image_labels, repo_name, resolve_base
from kit.manifest import Arm, ImageSpec, LoadedManifest
from kit.runtime.docker import connect, explanation

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
        write_context_tar(ctx, tar, layer_mtime())
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
        build_log_sha256=file_digest(log_path),
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
