"""The arms' images for a run: built (docker runtime) and recorded in images.json; a resume refuses
images that differ from the ones the bundle started with."""

from __future__ import annotations

from kit.errors import BundleError, SignatureError
from kit.experiment.session import BundleSession
from kit.files.images import ImagesFile
from kit.images import ImageInfo, build_images
from kit.images.context import context_subject
from kit.manifest import LoadedManifest
from kit.signing import ManifestTrust


def prepare_images(lm: LoadedManifest, session: BundleSession, *, allow_unpinned: bool,
                   trust: ManifestTrust | None = None) -> dict[str, ImageInfo]:
    bundle = session.bundle
    if lm.manifest.runtime != "docker":
        bundle.write_json("images.json", {})
        return {}
    images = build_images(lm, run_id=session.run_id, log_dir=bundle.path("images"), allow_unpinned=allow_unpinned)
    if trust is not None and trust.signed:
        check_built_contexts(images, trust)
    built = {a: i.as_dict() for a, i in images.items()}
    if session.resumed and bundle.exists("images.json"):
        before = bundle.read("images.json", ImagesFile).image_ids()
        changed = [a for a in built if before.get(a) != built[a].get("image_id")]
        if changed:
            raise BundleError(
                f"the image of arm(s) {', '.join(changed)} differs from the one this bundle started with "
                f"({', '.join(str(before.get(a))[:19] for a in changed)} then, "
                f"{', '.join(str(built[a].get('image_id'))[:19] for a in changed)} now); resuming would compare "
                "cells run on different images", hint="start a new run")
        return images
    bundle.write_json("images.json", built)
    return images


def check_built_contexts(images: dict[str, ImageInfo], trust: ManifestTrust) -> None:
    """The contexts were checked against the signature before the build; the build read them again, so
    what it hashed must be what was signed (a file changed in between is caught here, before any cell)."""
    for arm, info in images.items():
        signed = trust.contexts.get(context_subject(arm, info.context))
        if signed is not None and signed[0] != info.context_sha256:
            raise SignatureError(
                f"arm {arm}: image context {info.context} changed while kit was building it (signed sha256 "
                f"{signed[0][:16]}..., built from {info.context_sha256[:16]}...)",
                hint="review the change, sign the manifest again with `kit sign`, then run again")
