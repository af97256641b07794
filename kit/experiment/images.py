"""The arms' images for a run: built (docker runtime) and recorded in images.json; a resume refuses
images that differ from the ones the bundle started with."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.errors import BundleError
from kit.experiment.session import BundleSession
from kit.files.images import ImagesFile
from kit.manifest import LoadedManifest

if TYPE_CHECKING:
    from kit.images import ImageInfo


def prepare_images(lm: LoadedManifest, session: BundleSession, *, allow_unpinned: bool) -> dict[str, ImageInfo]:
    bundle = session.bundle
    if lm.manifest.runtime != "docker":
        bundle.write_json("images.json", {})
        return {}
    from kit.images import build_images  # the Docker SDK: only docker runs import it

    images = build_images(lm, run_id=session.run_id, log_dir=bundle.path("images"), allow_unpinned=allow_unpinned)
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
