"""The process runtime's start: the server's leader made the subreaper of everything it starts, and what left its
group found again by parent links (``kit.runtime.process`` stops it)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from kit.plumbing.procs import descendants, group_members
from kit.runtime.records import start_ticks

# Run before the server's command, in the same process: PR_SET_CHILD_SUBREAPER (36), which execve keeps, then an
# exec of the command, so that the PID, group, record and exit code are the command's, and every orphan below it
# (a daemon that double-forked and called setsid) is reparented to it, not to init, for as long as it lives. Not
# a preexec_fn: that runs Python between fork and exec, which is not safe in a process with threads (kit has).
SUBREAPER_SHIM = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)\n"
    "try:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "except OSError as e:\n"
    "    os.write(2, f'kit: cannot start {sys.argv[1]}: {e.strerror}\\n'.encode())\n"
    "    os._exit(127)\n"
)


def shim_argv(command: list[str]) -> list[str]:
    """``command`` behind the subreaper shim (isolated mode: no PYTHON* variable of the server's changes it)."""
    return [sys.executable, "-I", "-S", "-c", SUBREAPER_SHIM, *command]


def not_runnable(command0: str, path: str, workdir: Path) -> OSError | None:
    """Why ``command0`` cannot be executed from ``workdir`` with ``path`` as PATH (None: it can), as the exec would
    say it: checked before the shim starts, so that a typo is named at once rather than as the shim's exit 127."""
    if "/" in command0:
        target = workdir / command0  # an absolute path stays as it is
    else:
        found = shutil.which(command0, path=path)
        if found is None:
            return FileNotFoundError(2, os.strerror(2))
        target = Path(found)
    if not target.exists():
        return FileNotFoundError(2, os.strerror(2))
    if target.is_dir() or not os.access(target, os.X_OK):
        return PermissionError(13, os.strerror(13))
    return None


def left_the_group(leader: int, pgid: int) -> list[tuple[int, int | None]]:
    """The processes below ``leader`` by parent links that are not in its group (setsid, a double fork), each
    with its start time: ``still_the_same`` later stops only those, never a process that reused a PID."""
    members = set(group_members(pgid))
    return [(p, start_ticks(p)) for p in descendants(leader) if p not in members]


def still_the_same(taken: list[tuple[int, int | None]]) -> list[int]:
    """The PIDs of ``taken`` that are still the processes taken (same start time)."""
    return [p for p, ticks in taken if ticks is not None and start_ticks(p) == ticks]
