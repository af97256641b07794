"""Identifying images: what a built image is recorded as (``ImageInfo``), its name and labels, and its base.

Identity: ``image_id`` is the config digest on the classic image store (on the containerd store
it is the manifest digest; both stores are recorded by ``kit.runtime.docker.engine_facts``).
Local builds have no repo digest; the base's RepoDigests and image ID are recorded too.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from typing import Any

import requests
from docker.errors import APIError, ImageNotFound

from kit.errors import ImageBuildError
from kit.images.context import Context, SourceFacts, iso_utc
from kit.manifest import PINNED_RE, Arm, LoadedManifest
from kit.runtime.docker import MANAGED_LABEL, explanation

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


def repo_name(experiment: str, arm: str) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", f"{experiment}-{arm}".lower()).strip("-")
    return f"kit/{name}"



def image_labels(lm: LoadedManifest, arm: str, base: Base, ctx: Context, recipe: str, tag: str,
                 facts: SourceFacts) -> dict[str, str]:
    """OCI labels (created from SOURCE_DATE_EPOCH or the commit time, never the clock) and kit.* labels."""
    description = " ".join(lm.manifest.arm(arm).description.split())
    labels = {
        f"{OCI}.title": tag.split(":", 1)[0],
        f"{OCI}.description": description or f"kit experiment {lm.manifest.name}, arm {arm}",
        f"{OCI}.created": iso_utc(facts.epoch),
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



# --------------------------------------------------------------------------- bases


@dataclass(frozen=True)
class Base:
    reference: str  # as written (or the base arm's tag)
    image_id: str
    repo_digests: list[str]
    digest: str  # the pinned digest, or the local image ID
    pinned: bool
    arm: str | None = None


def is_placeholder(ref: str) -> bool:
    return ref.endswith(ZERO_DIGEST)


def check_base(lm: LoadedManifest, arm: Arm, *, allow_unpinned: bool) -> bool:
    """Refuse the all-zeros placeholder, and an unpinned base unless allowed; return whether it is pinned."""
    assert arm.image is not None and arm.image.base is not None
    ref = arm.image.base
    if is_placeholder(ref):
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
