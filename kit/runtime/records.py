"""Live-server records: one JSON file per process-runtime server in ``state_dir()``.

The process runtime writes a record when it starts a server and removes it after a proven stop; the
leftover gate and `kit clean` read them to find servers a dead kit left behind. Both import this
module (and not each other).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TypedDict, cast

from kit.plumbing.files import atomic_write


class ServerRecord(TypedDict):
    """What kit knows about a live process-runtime server group."""

    pgid: int
    pid: int
    run_id: str | None
    cell: str | None
    command: list[str]
    started: str  # UTC, kit.plumbing.clock format (older records: isoformat with +00:00)
    boot_id: str | None


def state_dir() -> Path:
    """Where kit keeps live-server records (for the leftover gate and `kit clean`)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "kit" / "servers"


def boot_id() -> str | None:
    """This boot's id: a record from an earlier boot names process groups that no longer exist."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None


def record_path(pgid: int, directory: Path | None = None) -> Path:
    return (directory or state_dir()) / f"{pgid}.json"


def write_record(record: ServerRecord, directory: Path | None = None) -> Path:
    return atomic_write(record_path(record["pgid"], directory), json.dumps(record).encode())


def read_record(path: Path) -> ServerRecord | None:
    """The record in ``path``, or None when it cannot be read or names no process group (perhaps it is
    being written right now)."""
    try:
        doc = json.loads(path.read_text())
        int(doc["pgid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return cast(ServerRecord, doc) if isinstance(doc, dict) else None


def record_files(directory: Path | None = None) -> list[Path]:
    """Every record file, sorted (none when the directory does not exist)."""
    d = directory or state_dir()
    return sorted(d.glob("*.json")) if d.is_dir() else []


def same_boot(record: ServerRecord) -> bool:
    """False when the record was written before this boot (its group cannot exist any more)."""
    return record.get("boot_id") in (None, boot_id())
