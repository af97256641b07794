"""The one reading policy of bundle files: missing, unreadable or invalid -> BundleError (exit 9) naming the
file and the field. ``Bundle.read`` uses it, and so do the rooms that read a bundle without opening it as
one (``kit.stats``, ``kit.report``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from kit.errors import BundleError
from kit.plumbing.files import read_bounded

M = TypeVar("M", bound=BaseModel)
MAX_FILE_BYTES = 64 << 20  # the largest typed bundle file kit reads whole (summaries of big runs are a few MB)


def read_file(root: Path, rel: str, model: type[M]) -> M:
    """The one reading policy of bundle files (``Bundle.read``, and ``Bundle.open`` before the bundle is
    known): missing, unreadable or invalid -> BundleError naming the file and the field."""
    path = root / rel
    try:
        data = json.loads(read_bounded(path, MAX_FILE_BYTES))
    except FileNotFoundError:
        raise BundleError(f"{root}: no {rel}, so not a (complete) kit bundle",
                          hint=f"check it with `kit verify {root}`") from None
    except RecursionError:
        raise BundleError(f"{path}: JSON nested too deeply; kit never writes such a file",
                          hint=f"check it with `kit verify {root}`") from None
    except (OSError, ValueError) as e:  # TooLarge is a ValueError
        raise BundleError(f"{path}: unreadable ({e})", hint=f"check it with `kit verify {root}`") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise BundleError(f"{path}: {_first_problem(e, model)}", hint=f"check it with `kit verify {root}`") from None


def _first_problem(e: ValidationError, model: type[BaseModel]) -> str:
    err = e.errors()[0]
    where = ".".join(str(x) for x in err["loc"])
    if not where:
        need = ", ".join(n for n, f in model.model_fields.items() if f.is_required())
        return f"not what kit writes ({err['msg']}; expected an object with {need or 'its fields'})"
    return f"field {where}: {err['msg']}" + (f" ({e.error_count() - 1} more problem(s))" if e.error_count() > 1 else "")
