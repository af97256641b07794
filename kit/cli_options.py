"""Options and output helpers shared by the commands of ``kit.cli`` and the command modules beside it."""

from __future__ import annotations

import functools
import getpass
import json
import os
import shlex
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kit.errors import UsageError
from kit.plumbing.files import atomic_write
from kit.plumbing.printable import printable
from kit.signing.trust import trust_policy

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"))


def output_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``-o FILE``: a new file, or a regular one to replace, in a directory that exists (kit makes none: a typo
    would leave directories behind, ``/nonexist/dir`` made as root). Anything else there is refused before any
    work: kit writes beside the target and renames over it, so a device (``/dev/null``, ``/dev/full``), a pipe or
    a link (``/dev/stdout``) would be replaced for every process on the machine, not written to."""
    if value is None:
        return None
    _in_a_directory(value)
    return key_output_file(ctx, param, value)


def key_output_file(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``kit keygen -o FILE``: as ``output_file``, but a missing directory is made, as for the default key
    (``~/.config/kit/id_ed25519``; ``~/.ssh`` on a machine that has none yet)."""
    if value is None:
        return None
    try:
        mode = os.lstat(value).st_mode
    except FileNotFoundError:
        return value
    except OSError as e:
        raise click.BadParameter(f"{value}: {e.strerror or e}; choose another path") from None
    what = next((name for test, name in _KINDS if test(mode)), None)
    if what is not None:
        raise click.BadParameter(
            f"{value} is {what}: kit writes only regular files (it would replace it, not write into it); choose a "
            "path that is a regular file or none yet")
    return value


def _in_a_directory(value: Path) -> None:
    """Refuse ``-o FILE`` whose directory is missing, or is not one, naming it and the fix."""
    parent = value.parent
    try:
        mode = os.stat(parent).st_mode
    except (FileNotFoundError, NotADirectoryError):
        raise click.BadParameter(f"{value}: its directory {parent} does not exist; create it first "
                                 f"(mkdir -p {shlex.quote(str(parent))}), or choose another path") from None
    except OSError as e:
        raise click.BadParameter(f"{value}: {parent}: {e.strerror or e}; choose another path") from None
    if not stat.S_ISDIR(mode):
        raise click.BadParameter(f"{value}: {parent} is not a directory; choose a path in a directory")


def output_dir(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """``--out DIR``: a directory (followed when a link) or one to make, under directories only."""
    if value is None:
        return None
    if os.path.islink(value) and not os.path.isdir(value):  # a dangling link, or one to a file: mkdir cannot
        raise click.BadParameter(f"{value} is a symbolic link to no directory ({os.readlink(value)}); choose "
                                 "another directory")
    at = value
    while True:
        try:
            mode = os.stat(at).st_mode
        except (FileNotFoundError, NotADirectoryError):  # not there, or under a file: look at its parent
            if at.parent == at:
                return value
            at = at.parent
            continue
        except OSError as e:
            raise click.BadParameter(f"{value}: {e.strerror or e}; choose another directory") from None
        if stat.S_ISDIR(mode):
            return value
        what = next((name for test, name in _KINDS if test(mode)), "a file")
        if at == value:
            raise click.BadParameter(f"{value} is {what}, not a directory; choose another directory")
        raise click.BadParameter(f"{value} cannot be made: {at} is {what}, not a directory; choose another directory")


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


def echo(text: str = "", *, err: bool = False, nl: bool = True) -> None:
    """``click.echo`` of text that may quote a file or a server: control characters shown escaped
    (``kit.plumbing.printable``)."""
    write_out(printable(text) + ("\n" if nl else ""), err=err)


# What one write hands the output stream at most: a write larger than its buffer (4 KiB on a pipe) goes to the pipe
# directly, and where the pipe takes only part of it before its reader goes away (`kit schema --bundle | head -c
# 10`), CPython's buffered writer drops the rest without an error, so the command exited 0, not 141. A piece
# within the buffer (1024 characters are at most 4 KiB of UTF-8) is written by a flush that raises BrokenPipeError.
_PIECE = 1024


def write_out(text: str, *, err: bool = False) -> None:
    """``text`` to stdout (or stderr), as is, in pieces each flushed (``_PIECE``): a closed pipe raises
    BrokenPipeError at the piece that meets it, which ``kit.cli`` ends with exit 141, as SIGPIPE would."""
    for start in range(0, len(text), _PIECE):
        click.echo(text[start:start + _PIECE], err=err, nl=False)  # click.echo flushes each


_json_out = {"written": False}  # whether this command has printed its JSON (kit.cli's error handler then adds none)


def echo_json(data: Any) -> None:
    write_out(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    _json_out["written"] = True


def json_start() -> None:
    """A new command: none of its JSON printed yet (one process may run several: tests, a library caller)."""
    _json_out["written"] = False


def json_written() -> bool:
    """Whether ``echo_json`` has printed this process's one JSON document (a command failing after its --json
    output, e.g. a failed gate, adds no second one)."""
    return _json_out["written"]


def user_name() -> str:
    """USER, LOGNAME, ..., else the password database's name for this uid, else "user" (a container's uid of its
    own has none: getpass raises KeyError there)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "user"


def asked_json(args: list[str]) -> bool:
    """Whether the command's own arguments (before any ``--``) hold ``--json``."""
    return "--json" in (args[:args.index("--")] if "--" in args else args)


def _write_text(path: Path, text: str) -> None:
    """Generated text to a file: written beside it and renamed over it, so a symlink at ``path`` is
    replaced, never followed, and ``output_file`` refused anything but a regular file there first."""
    try:
        atomic_write(path, text.encode())
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}", hint="choose a writable path with -o") from None


def emit(text: str, output: Path | None) -> None:
    """Generated text to stdout, or to FILE (with a note on stderr)."""
    if output is None:
        write_out(text)
    else:
        _write_text(output, text)
        echo(f"wrote {output}", err=True)
