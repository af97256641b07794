"""A directory's content as one sha256 (a model directory named by ``model.path``).

The digest is the sha256 of the lines ``"<relative path>\\0<sha256 of the file>\\n"``, one per regular file
under the directory, sorted by the relative path (``/``-separated). Symlinks to files are followed (a Hugging
Face cache snapshot is a directory of such links); a symlinked directory is refused (``ManifestError`` naming
the link), never skipped: leaving it out would sign a digest that omits part of the model. ``kit_hf.make_model``
computes the same digest for the directories it writes.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from kit.errors import ManifestError
from kit.plumbing.files import sha256_file

METHOD = "sha256 of sorted '<relative path>\\0<file sha256>\\n' lines over every regular file"


@dataclass(frozen=True)
class TreeDigest:
    digest: str
    files: dict[str, str]  # relative path -> sha256
    bytes: int


def tree_digest(root: Path) -> TreeDigest:
    """The digest of every regular file under ``root`` (OSError when it is not a readable directory,
    ManifestError when a directory under it is a symlink)."""
    if not root.is_dir():
        raise NotADirectoryError(f"{root}: not a directory")
    files: dict[str, str] = {}
    total = 0
    for top, dirs, names in os.walk(root, followlinks=False, onerror=_raise):
        dirs.sort()
        for name in dirs:
            if (link := Path(top) / name).is_symlink():
                raise ManifestError(
                    f"model.path: {link} is a symlink to a directory ({os.readlink(link)}); kit does not follow "
                    "directory links when it hashes the model",
                    hint="replace the link by the directory it names (or copy the tree with cp -rL), or set "
                    "model.digest: false")
        for name in names:
            path = Path(top) / name
            if not path.is_file():  # a dangling link, a socket, a FIFO
                continue
            digest, size = sha256_file(path.resolve())  # a link to a file counts as that file
            files[path.relative_to(root).as_posix()] = digest
            total += size
    ordered = sorted(files.items())
    tree = hashlib.sha256("".join(f"{p}\0{d}\n" for p, d in ordered).encode()).hexdigest()
    return TreeDigest(tree, dict(ordered), total)


def _raise(err: OSError) -> None:
    raise err
