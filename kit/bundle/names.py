"""Names and walking: what a path inside a bundle may look like, and the one walker every part uses.

A bundle holds only regular files and directories whose relative names are normalised POSIX
paths of valid UTF-8 without control characters or backslashes. The same rule serves writing,
signing, archiving and extracting, so whatever kit writes it can also archive and verify.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kit.errors import BundleError
from kit.plumbing.files import MAX_TREE_DEPTH, TreeTooDeep, tree
from kit.plumbing.jsontypes import utf8

PROVENANCE = "provenance.dsse.json"
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")


def check_rel(rel: str, what: str = "path") -> str:
    """Return ``rel`` if it is a safe, normalised, relative POSIX path; else raise BundleError."""
    problem = rel_problem(rel)
    if problem:
        raise BundleError(f"{what} {rel!r} refused: {problem}")
    return rel


def rel_problem(rel: str) -> str | None:
    """Why ``rel`` is not an acceptable bundle path (None when it is)."""
    if not rel:
        return "empty name"
    if rel.startswith("/"):
        return "absolute path"
    if _BAD_CHARS.search(rel):
        return "backslash, NUL or control character in the name"
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid UTF-8"
    parts = rel.split("/")
    if ".." in parts:
        return "'..' component"
    if any(p in ("", ".") for p in parts):
        return "empty or '.' component (name is not normalised)"
    return None


def check_component(name: str, what: str) -> str:
    """A single path component (an experiment name, a run id, a cell id)."""
    check_rel(name, what)
    if "/" in name:
        raise BundleError(f"{what} {name!r} refused: must be a single path component")
    return name


UNTOUCHED = "something other than kit put it there: use an untouched copy of the bundle (or its `kit archive` file)"


def walk(root: Path) -> tuple[list[str], list[str]]:
    """Every directory and regular file under ``root`` as relative POSIX paths (unsorted).

    Symlinks and special files (FIFOs, sockets, devices) are refused with BundleError.
    """
    dirs: list[str] = []
    files: list[str] = []
    try:
        for rel, mode in tree(root, MAX_WALK_DEPTH):  # a link is refused here before tree would list below it
            check_rel(rel, "file name in bundle")
            if stat.S_ISLNK(mode):
                raise BundleError(f"{rel}: is a symbolic link; a bundle holds only regular files and directories",
                                  hint=UNTOUCHED)
            if stat.S_ISDIR(mode):
                dirs.append(rel)
            elif stat.S_ISREG(mode):
                files.append(rel)
            else:
                raise BundleError(f"{rel}: is a special file (mode {stat.filemode(mode)}); "
                                  "a bundle holds only regular files and directories", hint=UNTOUCHED)
    except TreeTooDeep as e:
        raise BundleError(f"{e.rel}: nested deeper than {e.limit} directories; kit never writes such a bundle"
                          ) from None
    return dirs, files


MAX_WALK_DEPTH = MAX_TREE_DEPTH


def envelope_bytes(envelope: Mapping[str, Any]) -> bytes:
    """The one byte layout of a DSSE envelope kit writes (provenance, checkpoints); verification refuses any
    other layout."""
    return (json.dumps(envelope, indent=2, sort_keys=True, ensure_ascii=True) + "\n").encode()


def json_bytes(obj: object) -> bytes:
    """The one JSON layout of bundle files: sorted keys, indent 2, trailing newline, strict JSON."""
    return utf8(json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n")


def json_line(obj: object) -> bytes:
    """One JSON Lines record: sorted keys, compact, strict JSON."""
    return utf8(json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False) + "\n")
