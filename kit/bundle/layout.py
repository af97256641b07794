"""The bundle directory: its name, writing into it as things happen (atomically, never deleting), and
reading its typed files back with one error policy."""

from __future__ import annotations

import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from kit.bundle.names import PROVENANCE, check_component, check_rel, json_bytes, json_line, walk
from kit.errors import BundleError
from kit.files.base import BundleFile
from kit.files.read import read_file
from kit.files.run import RunFile
from kit.plumbing.clock import utc_compact
from kit.plumbing.files import append_line, atomic_write, fsync_dir
from kit.plumbing.redact import redact_json

M = TypeVar("M", bound=BaseModel)

_TMP_RE = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")


def is_temp_name(rel: str) -> bool:
    """Whether ``rel`` is the temp file of an atomic write (``kit.plumbing.files.temp_name``), not a result."""
    return bool(_TMP_RE.match(rel.rsplit("/", 1)[-1]))


@dataclass(frozen=True)
class Bundle:
    """A result bundle on disk. ``run_id`` is the short id at the end of the directory name."""

    root: Path
    run_id: str

    # ---- creating and opening

    @classmethod
    def create(cls, results_dir: Path, experiment: str, run_id: str | None = None) -> Bundle:
        """Make ``results_dir/<experiment>-<UTC yyyymmddThhmmssZ>-<run_id>``; run_id defaults to 6 random hex."""
        check_component(experiment, "experiment name")
        if run_id is not None:
            check_component(run_id, "run id")
        stamp = utc_compact()
        results_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(8):
            rid = run_id or secrets.token_hex(3)
            root = results_dir / f"{experiment}-{stamp}-{rid}"
            try:
                root.mkdir()
            except FileExistsError:
                if run_id is not None:
                    raise BundleError(f"{root} already exists", hint="choose another run id") from None
                continue
            return cls(root, rid)
        raise BundleError(f"could not find a free bundle name in {results_dir}")

    @classmethod
    def open(cls, path: Path, *, clean: bool = True) -> Bundle:
        """Open an existing bundle (to resume it); refuses anything that is not a kit bundle. ``clean``: remove
        the temp files of interrupted writes now (else the caller does, once it has verified the bundle)."""
        if not path.is_dir():
            raise BundleError(f"{path}: not a directory, so not a kit bundle")
        run = read_file(path, "run.json", RunFile)
        bundle = cls(path, run.run_id)
        if clean:
            bundle.remove_stale_temp_files()
        return bundle

    @classmethod
    def resume_at(cls, path: Path, run_id: str) -> Bundle:
        """The bundle at ``path`` with the run id its signatures vouch for (its run.json is not read: it may be
        one no checkpoint signed); temp files of interrupted writes removed."""
        bundle = cls(path, check_component(run_id, "run id"))
        bundle.remove_stale_temp_files()
        return bundle

    def remove_stale_temp_files(self) -> list[str]:
        """Temp files of atomic writes interrupted by a crash are not results; drop them on resume (the ones
        removed, returned)."""
        _, files = walk(self.root)
        gone = sorted(rel for rel in files if is_temp_name(rel))
        for rel in gone:
            (self.root / rel).unlink()
        return gone

    # ---- paths

    def path(self, rel: str | os.PathLike[str]) -> Path:
        """``root / rel``; refuses absolute paths, '..', empty components and odd characters."""
        text = os.fspath(rel)
        return self.root / check_rel(text, "bundle path")

    def cell_dir(self, cell_id: str) -> Path:
        """``cells/<cell_id>``, created if needed."""
        d = self.path(f"cells/{check_component(cell_id, 'cell id')}")
        d.mkdir(parents=True, exist_ok=True)
        return d

    # ---- writing

    def write_bytes(self, rel: str | os.PathLike[str], data: bytes) -> Path:
        """Write atomically: a temp file beside the target, fsync, rename, fsync the directory."""
        return atomic_write(self.path(rel), data)

    def write_json(self, rel: str | os.PathLike[str], obj: object) -> Path:
        """Atomic JSON: sorted keys, indent 2, trailing newline; NaN/Infinity are refused (ValueError).
        A typed bundle file is written with its ``schema_version``. Every string, keys too, passes through
        kit.plumbing.redact (as in ``append_jsonl``): text from a server is masked where it came in, this is the
        last look."""
        data = obj.to_json() if isinstance(obj, BundleFile) else obj
        return self.write_bytes(rel, json_bytes(redact_json(data)))

    def append_jsonl(self, rel: str | os.PathLike[str], obj: object) -> Path:
        """Append one compact JSON line and flush it to disk (gates.jsonl and the like)."""
        return append_line(self.path(rel), json_line(redact_json(obj)))

    def move_failed_attempt(self, cell_id: str, to: str = "failed") -> Path:
        """Move ``cells/<id>`` to ``<to>/<id>-a<n>`` (n = 1, 2, ...; ``to``: failed, or redone for a cell re-run
        by ``--redo``); records are never deleted."""
        src = self.path(f"cells/{check_component(cell_id, 'cell id')}")
        if not src.is_dir() or src.is_symlink():
            raise BundleError(f"{src}: no such cell directory to move aside")
        failed = self.path(check_component(to, "folder"))
        failed.mkdir(exist_ok=True)
        n = 1
        while (failed / f"{cell_id}-a{n}").exists():
            n += 1
        dst = failed / f"{cell_id}-a{n}"
        os.rename(src, dst)
        fsync_dir(failed)
        fsync_dir(src.parent)
        return dst

    def remove_provenance(self) -> None:
        """A resumed or re-rendered bundle drops its old signature before it changes."""
        self.path(PROVENANCE).unlink(missing_ok=True)

    # ---- reading

    def read(self, rel: str, model: type[M]) -> M:
        """A typed bundle file; BundleError (exit 9) naming the file, and the field, when it is missing,
        unreadable or invalid."""
        return read_file(self.root, check_rel(rel, "bundle path"), model)

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def files(self) -> list[str]:
        """Sorted relative POSIX paths of every regular file except provenance.dsse.json.

        Raises BundleError on symlinks and special files.
        """
        _, files = walk(self.root)
        return sorted(f for f in files if f != PROVENANCE)
