"""``images.json``: per arm, the image kit built and ran (empty for the process runtime)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import RootModel

from kit.files.base import Loose


class BuiltImage(Loose):
    image_id: str | None = None


class ImagesFile(RootModel[dict[str, BuiltImage]]):
    """``{arm: image}``. A root model (the file is a plain mapping), so it carries no schema_version."""

    file_pattern: ClassVar[str] = "images.json"

    def image_ids(self) -> dict[str, str | None]:
        return {arm: img.image_id for arm, img in self.root.items()}
