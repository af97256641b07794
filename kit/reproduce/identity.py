"""What each arm ran, in the original and in the new run: the image (docker runtime) or the server command (process
runtime), compared and every difference named.

Docker: the same image ID is the same image. A rebuild on another machine (another builder, another layer cache)
can give another ID from the same recipe; then the recipe decides (the pinned base and its digest, the Dockerfile's
and the context's sha256, the build args) and the layers (diff_ids) say where the images part. Process runtime: no
image; the argv each arm's server was started with (cells/<id>/server.json) is compared, argument by argument.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import RootModel

from kit.errors import BundleError
from kit.files.images import BuiltImage, ImagesFile
from kit.files.plan import PlanFile
from kit.files.read import read_file
from kit.files.reproduce import ImageIdentity
from kit.reproduce.setup import model_entry

RECIPE = (  # (field of images.json, what it is)
    ("reference", "base image as pinned"),
    ("base_image_id", "base image ID"),
    ("dockerfile_sha256", "Dockerfile sha256"),
    ("context_sha256", "build context sha256"),
    ("build_args", "build args"),
    ("base_arm", "base arm"),
)
DESCRIBED = (("os", "OS"), ("architecture", "architecture"), ("recipe_sha256", "recipe sha256"))


class _Json(RootModel[dict[str, object]]):
    pass


def _short(v: object) -> str:
    text = str(v)
    return text if len(text) <= 30 else text[:27] + "..."


def images_of(root: Path) -> dict[str, BuiltImage]:
    """images.json's arms ({} for the process runtime, or when the file is missing)."""
    if not (root / "images.json").is_file():
        return {}
    return dict(read_file(root, "images.json", ImagesFile).root)


def _field(img: BuiltImage, name: str) -> object:
    return getattr(img, name, None) if name in type(img).model_fields else (img.model_extra or {}).get(name)


def _layers(a: object, b: object) -> str | None:
    if not isinstance(a, list) or not isinstance(b, list):
        return None
    first = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
    if first is None and len(a) == len(b):
        return f"every one of the {len(a)} layers (diff_ids) is the same: only the image config differs"
    same = sum(1 for x, y in zip(a, b, strict=False) if x == y)
    where = f"first at layer {first + 1}" if first is not None else "one image has more layers"
    return f"{same} of {max(len(a), len(b))} layers (diff_ids) are the same ({where})"


def image_identity(arm: str, original: BuiltImage | None, new: BuiltImage | None) -> ImageIdentity:
    if original is None or new is None or not original.image_id or not new.image_id:
        missing = "the original" if original is None or not original.image_id else "the new run"
        return ImageIdentity(arm=arm, status="not_recorded", original=original.image_id if original else None,
                             new=new.image_id if new else None, differences=[f"no image recorded in {missing}"])
    if original.image_id == new.image_id:
        return ImageIdentity(arm=arm, status="identical", original=original.image_id, new=new.image_id)
    diffs = [f"{label}: {_short(_field(original, f))} originally, {_short(_field(new, f))} now"
             for f, label in RECIPE if _field(original, f) != _field(new, f)]
    status = "different" if diffs else "same_recipe"
    diffs.insert(0, f"image ID {_short(original.image_id)} originally, {_short(new.image_id)} now")
    diffs += [f"{label}: {_short(_field(original, f))} originally, {_short(_field(new, f))} now"
              for f, label in DESCRIBED if _field(original, f) != _field(new, f)]
    if (layers := _layers(_field(original, "diff_ids"), _field(new, "diff_ids"))) is not None:
        diffs.append(layers)
    return ImageIdentity(arm=arm, status=status, original=original.image_id, new=new.image_id, differences=diffs)


def commands_of(root: Path) -> dict[str, list[str]]:
    """Per arm, the argv of its first cell whose server.json recorded one (the process runtime)."""
    plan = read_file(root, "plan.json", PlanFile)
    out: dict[str, list[str]] = {}
    for cell in plan.cells:
        if cell.arm in out or not (root / "cells" / cell.id / "server.json").is_file():
            continue
        try:
            doc = read_file(root, f"cells/{cell.id}/server.json", _Json).root
        except BundleError:
            continue
        cmd = doc.get("command")
        if isinstance(cmd, list) and all(isinstance(x, str) for x in cmd):
            out[cell.arm] = [str(x) for x in cmd]
    return out


def _same_model(original: Path, new: Path) -> tuple[str, str] | None:
    """The two runs' model paths when both signed provenances record the same sha256 tree for them (model.digest):
    an argument differing only there names the same files."""
    a, b = model_entry(original), model_entry(new)
    if a is None or b is None or a[1] != b[1] or not a[1].startswith("sha256:"):
        return None
    return a[0], b[0]


def command_identity(arm: str, original: list[str] | None, new: list[str] | None,
                     model: tuple[str, str] | None = None) -> ImageIdentity:
    """``model``: (original path, new path) of a model whose sha256 tree is the same in both runs: arguments that
    differ only by it are the same (named in ``differences``, status unchanged)."""
    if original is None or new is None:
        return ImageIdentity(arm=arm, status="not_recorded", original=" ".join(original or []) or None,
                             new=" ".join(new or []) or None,
                             differences=["no server command recorded in " + ("the original" if original is None
                                                                              else "the new run")])
    if original == new:
        return ImageIdentity(arm=arm, status="identical", original=" ".join(original), new=" ".join(new))
    same: list[str] = []
    diffs: list[str] = []
    for i, (a, b) in enumerate(zip(original, new, strict=False)):
        if a == b:
            continue
        if model is not None and model[0] != model[1] and a.replace(model[0], "\0") == b.replace(model[1], "\0"):
            same.append(f"argument {i}: the model path {_short(model[0])} originally, {_short(model[1])} now: the "
                        "same sha256 tree (model.digest), so not a difference")
        else:
            diffs.append(f"argument {i}: {_short(a)!s} originally, {_short(b)} now")
    if len(original) != len(new):
        diffs.append(f"{len(original)} arguments originally, {len(new)} now")
    return ImageIdentity(arm=arm, status="different" if diffs else "identical", original=" ".join(original),
                         new=" ".join(new), differences=diffs + same)


def identities(arms: list[str], runtime: str, original: Path, new: Path) -> list[ImageIdentity]:
    """One entry per arm: images for the docker runtime, server commands for the process runtime."""
    if runtime == "docker":
        a, b = images_of(original), images_of(new)
        return [image_identity(arm, a.get(arm), b.get(arm)) for arm in arms]
    ca, cb = commands_of(original), commands_of(new)
    model = _same_model(original, new)
    return [command_identity(arm, ca.get(arm), cb.get(arm), model) for arm in arms]
