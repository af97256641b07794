"""Options and output helpers shared by the commands of ``kit.cli`` and the command modules beside it."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kit.signing.trust import trust_policy

json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")


def trust_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--trust FILE`` (adds to the user's own policy) and ``--trust-only FILE`` (replaces it), handed to the
    command as one ``trust`` tuple: the policy's files (``kit.signing.trust.trust_policy``)."""

    @functools.wraps(f)
    def command(*args: Any, trust: tuple[Path, ...], trust_only: tuple[Path, ...], **kwargs: Any) -> Any:
        return f(*args, trust=tuple(trust_policy(trust, trust_only)), **kwargs)

    files = click.Path(dir_okay=False, path_type=Path)
    command = click.option(
        "--trust-only", "trust_only", type=files, multiple=True, metavar="FILE",
        help="allowed_signers file(s) that REPLACE your own policy: only their keys are trusted (repeatable).",
    )(command)
    return click.option(
        "--trust", "trust", type=files, multiple=True, metavar="FILE",
        help="allowed_signers file(s) trusted IN ADDITION to your own policy, ~/.config/kit/allowed_signers "
        "(repeatable; --trust-only replaces it). Nothing beside or above the content checked is ever trusted.",
    )(command)


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
