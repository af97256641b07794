"""Commands kit prints for the user to paste: each one repeats every flag that decided the run it continues
(the trust policy, --allow-unsigned, --allow-unpinned, --key), since a resume takes none of them from the
bundle, so that the command works as printed."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kit import allowed_signers
from kit.errors import KitError
from kit.signing.trust import NS_BUNDLE, load_trust, trust_flags, user_trust_file


def vouches(files: Sequence[Path], runner: Ed25519PublicKey) -> bool:
    """Whether the policy of ``files`` trusts ``runner`` for kit-bundle (a resume verifies the bundle so)."""
    try:
        entries = load_trust(files)
    except KitError:
        return False
    return bool(allowed_signers.decide(entries, runner, None, NS_BUNDLE, datetime.now(UTC)))


def resume_command(root: Path, *, trust: Sequence[Path], allow_unsigned: bool, allow_unpinned: bool,
                   key: Path | None, runner: Ed25519PublicKey | None = None) -> str:
    """``kit run --resume ROOT`` with the flags of the run it continues (``trust``: a ``trust_policy``
    answer), shell-quoted, every path absolute."""
    return shlex.join(["kit", "run", "--resume", str(root.resolve()),
                       *_run_flags(trust, allow_unsigned, allow_unpinned, key, runner)])


def reproduce_command(source: Path, root: Path, *, trust: Sequence[Path], allow_untrusted_source: bool,
                      allow_unsigned: bool, allow_unpinned: bool, key: Path | None, project: Path | None,
                      runner: Ed25519PublicKey | None = None, until_decided: bool = False) -> str:
    """``kit reproduce SOURCE --resume ROOT``, which finishes the reproduction and judges it, with the flags of
    the one it continues: the same policy verifies SOURCE again and the new bundle's runner (``until_decided``:
    its looks continue)."""
    argv = ["kit", "reproduce", str(source.resolve()), "--resume", str(root.resolve())]
    argv += ["--project", str(project.resolve())] if project is not None else []
    argv += ["--allow-untrusted-source"] if allow_untrusted_source else []
    argv += ["--until-decided"] if until_decided else []
    return shlex.join(argv + _run_flags(trust, allow_unsigned, allow_unpinned, key, runner))


def _run_flags(trust: Sequence[Path], allow_unsigned: bool, allow_unpinned: bool, key: Path | None,
               runner: Ed25519PublicKey | None) -> list[str]:
    """The flags that decided a run. A resume first verifies the bundle's runner (``runner``) for kit-bundle:
    where the run's own policy (--trust-only files) does not trust it and the user's own file does, that file is
    added, or the printed command would be refused."""
    files = list(trust)
    user = user_trust_file()
    if runner is not None and files and user not in files and not vouches(files, runner) and vouches([user], runner):
        files.append(user)
    argv = trust_flags(files)
    argv += ["--allow-unsigned"] if allow_unsigned else []
    argv += ["--allow-unpinned"] if allow_unpinned else []
    argv += ["--key", str(key.resolve())] if key is not None else []
    return argv
