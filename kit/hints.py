"""Commands kit prints for the user to paste: each one repeats every flag that decided the run it continues
(the trust policy, --allow-unsigned, --allow-unpinned, --key), since a resume takes none of them from the
bundle, so that the command works as printed. `kit verify` of a bundle whose run never ended prints the one its
run would have printed (``finish_hint``), from the flags and command line its signed run.json records."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from kit import allowed_signers
from kit.errors import KitError
from kit.files.run import RunFile
from kit.signing.trust import NS_BUNDLE, load_trust, trust_flags, user_trust_file


def vouches(files: Sequence[Path], runner: Ed25519PublicKey) -> bool:
    """Whether the policy of ``files`` trusts ``runner`` for kit-bundle (a resume verifies the bundle so)."""
    try:
        entries = load_trust(files)
    except KitError:
        return False
    return bool(allowed_signers.decide(entries, runner, None, NS_BUNDLE, datetime.now(UTC)))


def untrusted_runner(trust: Sequence[Path], runner: Ed25519PublicKey, public_line: str) -> str | None:
    """Why a resume of this run's bundle would be refused, and the fix; None where the run's policy or the user's
    own file trusts the runner key for kit-bundle (a resume verifies the bundle so)."""
    user = user_trust_file()
    if vouches(trust, runner) or vouches([user], runner):
        return None
    return (f"the runner key is not trusted for kit-bundle by your policy, so its bundle verifies as UNTRUSTED and "
            f"a resume of it is refused; to trust it, add this line to {user}: "
            f'kit-runner namespaces="{NS_BUNDLE}" {" ".join(public_line.split()[:2])}')


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
    where the run's own policy (--trust-only files) does not trust it, the user's own file is added: it trusts the
    runner, or it is where ``untrusted_runner`` tells the user to add the line that does; without it the printed
    command would be refused."""
    files = list(trust)
    user = user_trust_file()
    if runner is not None and files and user not in files and not vouches(files, runner):
        files.append(user)
    argv = trust_flags(files)
    argv += ["--allow-unsigned"] if allow_unsigned else []
    argv += ["--allow-unpinned"] if allow_unpinned else []
    argv += ["--key", str(key.resolve())] if key is not None else []
    return argv


# --------------------------------------------------------------------------- a run that never ended (kit verify)

_VALUED = frozenset({"--out", "--resume", "--project", "--trust", "--trust-only", "--key", "--redo"})


@dataclass
class Invocation:
    """One kit command line as run.json records it (``argv``, or a resume's), read as kit's CLI reads it."""

    command: str | None = None  # run, reproduce
    args: list[str] = field(default_factory=list)  # the positional ones: the manifest, the source
    options: dict[str, str] = field(default_factory=dict)  # the last value of each option that takes one
    flags: set[str] = field(default_factory=set)
    values: dict[str, list[str]] = field(default_factory=dict)  # every value of each, in order (--trust repeats)

    @classmethod
    def of(cls, argv: Sequence[str]) -> Invocation:
        rest = list(argv[1:])
        while rest and rest[0].startswith("-"):  # kit's own options (--debug)
            rest.pop(0)
        out = cls(rest[0] if rest else None)
        words = iter(rest[1:])
        for word in words:
            name, eq, value = word.partition("=")
            if word == "--":
                out.args += list(words)
            elif name in _VALUED:
                got = value if eq else next(words, None)
                if got is not None:
                    out.options[name] = got
                    out.values.setdefault(name, []).append(got)
            elif word.startswith("-") and word != "-":
                out.flags.add(word)
            else:
                out.args.append(word)
        return out


def finish_hint(root: Path, run: RunFile, trust: Sequence[Path]) -> str:
    """What finishes the run of ``root`` that never ended (its signed checkpoints hold what it measured), as that
    run would have printed it had it lived: ``kit reproduce SOURCE --resume ROOT`` for a reproduction, else ``kit
    run --resume ROOT``. --allow-unsigned, --allow-unpinned and --until-decided as ``run`` (its signed run.json)
    records the run was started with; the source, --project, --key and --allow-untrusted-source as the command
    line it records gives them (a relative path made absolute where the record tells where it ran); the trust
    flags of ``trust``, the policy that verified its checkpoints."""
    reproduction = run.reproduces is not None or Invocation.of(run.argv).command == "reproduce"
    inv, base = latest_invocation(root, run, "reproduce" if reproduction else "run")
    until = run.flags.model_dump().get("until_decided") is True
    recorded = [f for f, on in (("--allow-unsigned", run.flags.allow_unsigned),
                                ("--allow-unpinned", run.flags.allow_unpinned),
                                ("--until-decided", reproduction and until),
                                ("--allow-untrusted-source", reproduction and "--allow-untrusted-source" in inv.flags))
                if on]
    notes = [f"{' and '.join(recorded)} as its signed run.json records the run was started with "
             f"{'it' if len(recorded) == 1 else 'them'}"] if recorded else []
    key, note = _path_option(inv, "--key", base, "to sign with that key again")
    notes += note
    flags = _run_flags(trust, run.flags.allow_unsigned, run.flags.allow_unpinned, key, None)
    if not reproduction:
        again = shlex.join(["kit", "run", "--resume", str(root.resolve()), *flags])
        return f"its run never ended; its signed checkpoints let `{again}` finish it" + _said(notes)
    project, note = _path_option(inv, "--project", base, "(the project whose images/ holds its build contexts)")
    source = inv.args[0] if inv.args else run.reproduces.source.path if run.reproduces is not None else "SOURCE"
    where = _recorded_path(source, base)
    notes = [_source_note(source, where), *note, *notes]
    argv = ["kit", "reproduce", str(where.resolve()) if where is not None else source, "--resume", str(root.resolve())]
    argv += ["--project", str(project.resolve())] if project is not None else []
    argv += [f for f in ("--allow-untrusted-source", "--until-decided") if f in recorded]
    return (f"its reproduction (kit reproduce) never ended; `{shlex.join(argv + flags)}` finishes it from its signed "
            "checkpoints and judges it" + _said(notes))


def _said(notes: list[str]) -> str:
    return f" ({'; '.join(notes)})" if notes else ""


def _source_note(source: str, where: Path | None) -> str:
    if where is None:
        return (f"the source {shlex.quote(source)} as its signed run.json records it, relative to the directory the "
                "reproduction ran in, which the record does not tell: paste it there, or give its path instead")
    if not where.exists():
        return (f"the source as its signed run.json records it; nothing is at {where} now: give the source bundle's "
                "path in its place")
    return "the source as its signed run.json records it: if the source bundle has moved since, give its path instead"


def latest_invocation(root: Path, run: RunFile, command: str) -> tuple[Invocation, Path | None]:
    """The last recorded command line of ``command`` (the start's, or a resume's), and the directory it ran in."""
    lines = [(run.argv, True), *((r.argv, False) for r in run.resumed)]
    for argv, first in reversed(lines):
        inv = Invocation.of(argv)
        if inv.command == command:
            return inv, _ran_in(root, run, inv, first)
    return Invocation(command), None


def _ran_in(root: Path, run: RunFile, inv: Invocation, first: bool) -> Path | None:
    """Where ``inv`` ran, as far as the record tells: the bundle's path less its --resume, or its directory's less
    --out (where the bundle has not moved since); else, for the start, the manifest's absolute path (run.json's
    manifest_source) less the one given (`kit reproduce` records its project's, the current directory's)."""
    here = root.resolve()
    found = _less(here, inv.options["--resume"]) if "--resume" in inv.options else \
        _less(here.parent, inv.options.get("--out", "results"))
    if found is not None or not first or not run.manifest_source or not Path(run.manifest_source).is_absolute():
        return found
    source = Path(run.manifest_source)
    if inv.command == "reproduce":
        return source.parent if source.name == "reproduce-source.yaml" and "--project" not in inv.options else None
    return _less(source, inv.args[0]) if inv.args else None


def _less(path: Path, given: str) -> Path | None:
    """``path`` without the trailing ``given`` (a relative path, normalized), or None when it does not end so."""
    rel = Path(os.path.normpath(given))
    if rel.is_absolute() or ".." in rel.parts:
        return None
    n = len(rel.parts)
    return Path(*path.parts[:len(path.parts) - n]) if n == 0 or path.parts[-n:] == rel.parts else None


def _recorded_path(value: str, base: Path | None) -> Path | None:
    """A path from a recorded command line, absolute: as recorded, or under ``base`` (None where neither)."""
    p = Path(value)
    return p if p.is_absolute() else base / p if base is not None else None


def _path_option(inv: Invocation, option: str, base: Path | None, why: str) -> tuple[Path | None, list[str]]:
    """The path ``option`` gave ``inv``, where it can be told and is there now; else a note that says what to add."""
    if option not in inv.options:
        return None, []
    given = inv.options[option]
    path = _recorded_path(given, base)
    if path is not None and path.exists():
        return path, []
    return None, [f"it ran with {option} {shlex.quote(given)}, which is not to be found from here: add {option} with "
                  f"its path {why}"]
