"""Building and identifying the arms' images, and pinning their bases (`kit lock`).

    context   the build context tar and its digests, source facts (revision, creation time)
    identity  ImageInfo (what images.json records), names, labels, the base image
    build     the streaming build through the Docker SDK
    lock      `kit lock`: pinning bases by registry digest

Every public name is importable from ``kit.images``.
"""

from kit.images.build import build_images, build_one
from kit.images.context import (
    ALWAYS_EXCLUDE,
    FALLBACK_EPOCH,
    INCLUDE_FILE,
    Context,
    SourceFacts,
    collect_context,
    source_facts,
    write_context_tar,
)
from kit.images.identity import (
    OCI,
    ZERO_DIGEST,
    Base,
    ImageInfo,
    check_base,
    image_labels,
    repo_name,
    resolve_base,
)
from kit.images.lock import LockChange, lock_manifest, split_reference

__all__ = [
    "ALWAYS_EXCLUDE",
    "FALLBACK_EPOCH",
    "INCLUDE_FILE",
    "OCI",
    "ZERO_DIGEST",
    "Base",
    "Context",
    "ImageInfo",
    "LockChange",
    "SourceFacts",
    "build_images",
    "build_one",
    "check_base",
    "collect_context",
    "image_labels",
    "lock_manifest",
    "repo_name",
    "resolve_base",
    "source_facts",
    "split_reference",
    "write_context_tar",
]
