"""One error tree for kit, and the one place where errors map to exit codes."""

from __future__ import annotations

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
    INTERRUPTED = 130


class KitError(Exception):
    """Base of every error kit reports to a user.

    ``message`` says what is wrong and shows the evidence; ``hint`` says how to fix it.
    """

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nHint: {self.hint}"


class UsageError(KitError):
    exit_code = ExitCode.USAGE


class ManifestError(KitError):
    exit_code = ExitCode.INVALID_MANIFEST


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


class Interrupted(KitError):
    """Ctrl-C, SIGTERM or SIGHUP: the run stopped cleanly and can be resumed."""

    exit_code = ExitCode.INTERRUPTED
