"""The one reading policy of bundle files: missing, unreadable or invalid -> BundleError (exit 9) naming the
file and the field. ``Bundle.read`` uses it, and so do the rooms that read a bundle without opening it as
one (``kit.stats``, ``kit.report``)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kit.errors import BundleError
from kit.plumbing.files import TreeTooDeep, first_link, read_bounded
from kit.plumbing.jsontypes import TooDeep, loads

M = TypeVar("M", bound=BaseModel)
MAX_FILE_BYTES = 64 << 20  # the largest typed bundle file kit reads whole (summaries of big runs are a few MB)


def read_file(root: Path, rel: str, model: type[M]) -> M:
    """The one reading policy of bundle files (``Bundle.read``, and ``Bundle.open`` before the bundle is
    known): missing, unreadable or invalid -> BundleError naming the file and the field."""
    path = root / rel
    try:
        data = loads(read_bounded(path, MAX_FILE_BYTES, follow=False))
    except FileNotFoundError:
        raise BundleError(f"{root}: no {rel}, so not a (complete) kit bundle",
                          hint=f"check it with `kit verify {root}`") from None
    except TooDeep:
        raise BundleError(f"{path}: JSON nested too deeply; kit never writes such a file",
                          hint=f"check it with `kit verify {root}`") from None
    except (OSError, ValueError) as e:  # TooLarge is a ValueError
        raise BundleError(f"{path}: unreadable ({e})", hint=f"check it with `kit verify {root}`") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise BundleError(f"{path}: {_first_problem(e, model)}", hint=f"check it with `kit verify {root}`") from None


def refuse_links(root: Path) -> None:
    """BundleError where some file or folder of the bundle ``root`` is a symbolic link: kit writes none, ``kit
    verify`` refuses them, and what reads a bundle without verifying it (`kit compare`, the statistics) follows
    none out of it (a shared bundle's ``manifest.yaml`` linked to a file of yours would be quoted back)."""
    try:
        link = first_link(root)
    except (OSError, TreeTooDeep) as e:
        raise BundleError(f"{root}: cannot look through it ({e})", hint=f"check it with `kit verify {root}`") from None
    if link is not None:
        raise BundleError(f"{root / link}: a symbolic link; a bundle holds only regular files and folders, and "
                          "kit follows none out of it", hint=f"check it with `kit verify {root}`")


def _first_problem(e: ValidationError, model: type[BaseModel]) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    if not where:
        need = ", ".join(n for n, f in model.model_fields.items() if f.is_required())
        return f"not what kit writes ({err['msg']}; expected an object with {need or 'its fields'})"
    return f"field {where}: {err['msg']}" + (f" ({e.error_count() - 1} more problem(s))" if e.error_count() > 1 else "")
