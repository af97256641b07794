"""One error tree for kit, and the one place where errors map to exit codes."""

from __future__ import annotations

import errno
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    INTERNAL = 1
    USAGE = 2
    INVALID_MANIFEST = 3
    SIGNATURE = 4
    GATE_FAILED = 5
    IMAGE_BUILD_FAILED = 6
    SERVER_FAILED = 7
    LOAD_FAILED = 8
    BUNDLE_INVALID = 9
    NOT_REPRODUCED = 10  # kit reproduce: inconsistent, an effect outside the original's prediction interval
    INCONCLUSIVE = 11  # kit reproduce: imprecise, nothing inconsistent but not every effect within the margin
    SLURM_UNAVAILABLE = 12
    SLURM_REFUSED = 13
    STORAGE = 14  # writing failed: no space left (ENOSPC, EDQUOT) or an I/O error (EIO); the bundle stays resumable
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # stdout's reader went away (`kit plan M | head`): 128 + SIGPIPE, as a shell reports it


class KitError(Exception):
    """Base of every error kit reports to a user.

    ``message`` says what is wrong and shows the evidence; ``hint`` says how to fix it; ``notes`` are
    what a caller that saw the error pass adds (where the bundle is, how to resume). A message is never
    edited after the error is raised: callers add notes.
    """

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.notes: list[str] = []

    def note(self, text: str) -> KitError:
        """Add a line shown after the message (and before the hint); returns the error, to re-raise it."""
        self.notes.append(text)
        return self

    def __str__(self) -> str:
        return "\n".join([self.message, *self.notes, *([f"Hint: {self.hint}"] if self.hint else [])])


class UsageError(KitError):
    exit_code = ExitCode.USAGE


class ManifestError(KitError):
    exit_code = ExitCode.INVALID_MANIFEST


class ModelPathMissing(ManifestError):
    """model.path is not on the host that would serve it (kit submit says whose path it is)."""


class SignatureError(KitError):
    exit_code = ExitCode.SIGNATURE


class GateFailed(KitError):
    exit_code = ExitCode.GATE_FAILED


class ImageBuildError(KitError):
    exit_code = ExitCode.IMAGE_BUILD_FAILED


class ServerError(KitError):
    exit_code = ExitCode.SERVER_FAILED


class LoadError(KitError):
    exit_code = ExitCode.LOAD_FAILED


class BundleError(KitError):
    exit_code = ExitCode.BUNDLE_INVALID


class Inconsistent(KitError):
    """`kit reproduce` ran and judged: at least one A/B effect lies outside the original's prediction interval (the
    Holm-adjusted test of no difference rejects; the new bundle is complete and signed; its reproduce.md says
    where)."""

    exit_code = ExitCode.NOT_REPRODUCED


class Imprecise(KitError):
    """`kit reproduce` ran and judged: nothing is inconsistent with the original, but not every effect is shown
    equivalent within the margin (too few repeats for it, a direction not held, or a level client-bound or with too
    few cells)."""

    exit_code = ExitCode.INCONCLUSIVE
class SlurmUnavailable(KitError):
    """No Slurm here: its commands are missing, or the controller does not answer."""

    exit_code = ExitCode.SLURM_UNAVAILABLE


class SlurmRefused(KitError):
    """A Slurm command answered with an error (a bad option, an unknown partition or job, a limit)."""

    exit_code = ExitCode.SLURM_REFUSED


class CellsFailed(KitError):
    """One or more cells of a run failed; the exit code is the first failed cell's (7 server, 8 load)."""

    def __init__(self, message: str, *, exit_code: int, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.exit_code = ExitCode(exit_code)


class Interrupted(KitError):
    """Ctrl-C, SIGTERM or SIGHUP: the run stopped cleanly and can be resumed."""

    exit_code = ExitCode.INTERRUPTED


class StorageError(KitError):
    """The disk refused a write (full, over quota, or an I/O error): nothing kit can fix by itself."""

    exit_code = ExitCode.STORAGE


STORAGE_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                  errno.EIO: "input/output error (a failing disk or file system)",
                  errno.EROFS: "a read-only file system", errno.EACCES: "permission denied",
                  errno.EPERM: "operation not permitted"}
FIX_SPACE = "free space (or fix the disk)"
_ACCESS = {errno.EROFS, errno.EACCES, errno.EPERM}


def storage_error(e: BaseException, hint: str = f"{FIX_SPACE}, then resume") -> StorageError | None:
    """``e`` as a StorageError when it is an OSError of a full disk, a failing one, or a file system that refuses
    kit a path (read-only, not this user's); None otherwise. For a refused path, the hint's "free space" becomes
    "make it writable"."""
    if not isinstance(e, OSError) or e.errno not in STORAGE_ERRNOS:
        return None
    if e.errno in _ACCESS:
        hint = hint.replace(FIX_SPACE, "make it writable for this user (or use another place)")
    where = f" at {e.filename}" if e.filename else ""
    return StorageError(f"{STORAGE_ERRNOS[e.errno]}{where} ([Errno {e.errno}] {e.strerror})", hint=hint)


class SummaryFailed(KitError):
    """Every cell ran, but no summary could be computed from the records: no verdict, never exit 0."""

    exit_code = ExitCode.INTERNAL
