"""The bundle directory: its name, and writing into it as things happen (atomically, never deleting)."""

from __future__ import annotations

import json
import os
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kit.bundle.names import PROVENANCE, check_component, check_rel, json_bytes, json_line, walk
from kit.errors import BundleError

_TMP_RE = re.compile(r"^\..+\.tmp-\d+-[0-9a-f]{8}$")


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
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
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
    def open(cls, path: Path) -> Bundle:
        """Open an existing bundle (to resume it); refuses anything that is not a kit bundle."""
        if not path.is_dir():
            raise BundleError(f"{path}: not a directory, so not a kit bundle")
        run_json = path / "run.json"
        try:
            run = json.loads(run_json.read_bytes())
        except FileNotFoundError:
            raise BundleError(f"{path}: not a kit bundle (no run.json)") from None
        except (OSError, ValueError) as e:
            raise BundleError(f"{run_json}: unreadable ({e}); not a kit bundle") from None
        if not isinstance(run, dict) or not isinstance(run.get("run_id"), str):
            raise BundleError(f"{run_json}: has no run_id; not a kit bundle")
        bundle = cls(path, run["run_id"])
        bundle._remove_stale_temp_files()
        return bundle

    def _remove_stale_temp_files(self) -> None:
        """Temp files of atomic writes interrupted by a crash are not results; drop them on resume."""
        _, files = walk(self.root)
        for rel in files:
            if _TMP_RE.match(rel.rsplit("/", 1)[-1]):
                (self.root / rel).unlink()

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
        dest = self.path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(dest.parent)
        return dest

    def write_json(self, rel: str | os.PathLike[str], obj: Any) -> Path:
        """Atomic JSON: sorted keys, indent 2, trailing newline; NaN/Infinity are refused (ValueError)."""
        return self.write_bytes(rel, json_bytes(obj))

    def append_jsonl(self, rel: str | os.PathLike[str], obj: Any) -> Path:
        """Append one compact JSON line and flush it to disk (gates.jsonl and the like)."""
        dest = self.path(rel)
        dest.parent.mkdir(parents=True, exist_ok=True)
        line = json_line(obj)
        with open(dest, "ab") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        return dest

    def move_failed_attempt(self, cell_id: str) -> Path:
        """Move ``cells/<id>`` to ``failed/<id>-a<n>`` (n = 1, 2, ...); records are never deleted."""
        src = self.path(f"cells/{check_component(cell_id, 'cell id')}")
        if not src.is_dir() or src.is_symlink():
            raise BundleError(f"{src}: no such cell directory to move aside")
        failed = self.path("failed")
        failed.mkdir(exist_ok=True)
        n = 1
        while (failed / f"{cell_id}-a{n}").exists():
            n += 1
        dst = failed / f"{cell_id}-a{n}"
        os.rename(src, dst)
        _fsync_dir(failed)
        _fsync_dir(src.parent)
        return dst

    def remove_provenance(self) -> None:
        """A resumed or re-rendered bundle drops its old signature before it changes."""
        self.path(PROVENANCE).unlink(missing_ok=True)

    # ---- reading

    def files(self) -> list[str]:
        """Sorted relative POSIX paths of every regular file except provenance.dsse.json.

        Raises BundleError on symlinks and special files.
        """
        _, files = walk(self.root)
        return sorted(f for f in files if f != PROVENANCE)


def _fsync_dir(d: Path) -> None:
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
