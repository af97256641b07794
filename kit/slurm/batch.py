"""What kit asks Slurm for: the allocation a manifest's ``hardware`` needs, the sbatch options, and the
batch script that runs ``kit run`` inside the allocation.

The options go to sbatch as arguments (argv), never as ``#SBATCH`` lines: sbatch's own parser of those lines
reads a backslash as an escape even inside single quotes, so a path quoted for the shell (a bundle whose name
holds backslash-quote pairs, then ``--mail-user=...``) could end its word there and turn the rest of the name
into options. The script holds no ``#SBATCH`` line at all; it records the sbatch command after its first
command, where sbatch no longer looks. Values sbatch reads specially even as arguments are refused or
escaped (``check_value``, ``log_pattern``).

The script ``exec``s ``kit run``, so kit is the batch step's main process: ``scancel`` (SIGTERM) and the
time-limit warning (``--signal=B:TERM@120``) reach it directly, and its existing SIGTERM path stops the
server and signs a consistent, resumable bundle before Slurm's KillWait runs out.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kit.errors import UsageError
from kit.manifest import Manifest
from kit.signing.trust import trust_flags

JOB_PREFIX = "kit-"  # every job kit submits is named kit-<experiment> (kit jobs lists those)
COMMENT_PREFIX = "kit "  # and carries a comment "kit out=DIR" or "kit bundle=DIR": where its bundle goes
TERM_WARNING_S = 120  # SIGTERM this long before the time limit: kit stops the cell and signs the bundle
# Options kit sets itself; --slurm-opt cannot change them (they decide what kit jobs finds and how kit stops).
# sbatch takes any unambiguous prefix of a long option (--job=x is --job-name=x, --ar=0-3 is --array=0-3), so
# a name that is a prefix of one of these is refused too; the short forms are letters in a cluster (-HJx).
RESERVED = ("--array", "--job-name", "--comment", "--output", "--error", "--parsable", "--wrap", "--export",
            "--chdir", "--signal")
RESERVED_SHORT = {"a": "--array", "J": "--job-name", "o": "--output", "e": "--error", "D": "--chdir"}
_FLAG_LETTERS = "hHIkOQsuvVW"  # sbatch's short options that take no argument: a cluster goes on after them

@dataclass(frozen=True)
class Allocation:
    """What one experiment asks Slurm for."""

    nodes: int
    gpus_per_node: int | None  # None: no GPU request (no GPUs, or 'all' of an exclusive node)
    exclusive: bool
    all_gpus: bool = False  # hardware.gpus 'all' without gpus_per_node

    def options(self) -> list[str]:
        opts = [f"--nodes={self.nodes}", "--ntasks-per-node=1"]
        if self.gpus_per_node:
            opts.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.exclusive:
            opts.append("--exclusive")
        return opts

    def describe(self) -> str:
        gpus = f"{self.gpus_per_node} GPU(s) per node" if self.gpus_per_node else "no GPU request"
        if self.gpus_per_node is None and self.all_gpus:
            gpus += " (hardware.gpus 'all': the exclusive node's GPUs)"
        return f"{self.nodes} node(s), {gpus}, {'exclusive' if self.exclusive else 'shared'}"


def allocation(m: Manifest, *, exclusive: bool = True) -> Allocation:
    hw = m.hardware
    per_node = hw.gpus_per_node
    if per_node is None and isinstance(hw.gpus, int) and hw.gpus > 0:
        per_node = hw.gpus
    return Allocation(nodes=hw.nodes, gpus_per_node=per_node or None, exclusive=exclusive,
                      all_gpus=hw.gpus == "all" and per_node is None)


def check_value(what: str, value: str) -> str:
    """A path or text kit puts into an sbatch option: no control character (a newline would start a new line
    in the job's comment and log name, and in anything that parses them line by line)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UsageError(f"{what} {value!r} holds a control character (a newline, a tab, ...), which kit does not "
                         "pass to Slurm", hint="rename or move it to a path without control characters")
    return value


def log_pattern(directory: Path, name: str) -> str:
    """``--output`` for a log in ``directory``: sbatch reads ``%`` there as its file-name pattern (``%%`` is a
    literal one) and a backslash anywhere turns every pattern off (the jobs would share one log named
    ``%x-%j.out``), so a directory with a backslash is refused."""
    d = check_value("the directory", str(directory))
    if "\\" in d:
        raise UsageError(f"the Slurm log directory {d!r} holds a backslash, which sbatch reads in --output as "
                         "'turn off the %j patterns'", hint="give --out (or keep the bundle in) a directory whose "
                                                            "path has no backslash")
    return f"{d.replace('%', '%%')}/{name}"


def check_slurm_opts(opts: Sequence[str]) -> list[str]:
    """--slurm-opt values: each one sbatch option (``--partition=gpu``, ``--time=04:00:00``), none of kit's own."""
    for o in opts:
        if not re.match(r"--?[A-Za-z]", o) or any(c in o for c in "\n\r\0"):
            raise UsageError(f"--slurm-opt {o!r} is not one sbatch option",
                             hint="give each option whole, e.g. --slurm-opt=--partition=gpu --slurm-opt=--time=4:00:00")
        if (name := reserved_option(o)) is not None:
            raise UsageError(f"--slurm-opt {o}: kit sets {name} itself (it decides where the bundle and the log go "
                             "and how kit stops the run)", hint="leave it out; kit submit --help lists the options")
    return list(opts)


def reserved_option(o: str) -> str | None:
    """The reserved option ``o`` would set as sbatch reads it (a long name's unambiguous prefix, a short letter
    anywhere in a cluster of flags), or None."""
    if o.startswith("--"):
        name = re.split(r"[=\s]", o, maxsplit=1)[0]
        return next((r for r in RESERVED if r.startswith(name)), None)
    for letter in o[1:]:
        if letter in RESERVED_SHORT:
            return f"-{letter} ({RESERVED_SHORT[letter]})"
        if letter not in _FLAG_LETTERS:
            return None  # an option that takes an argument: the rest of the word is its value
    return None


def sbatch_options(alloc: Allocation, *, job_name: str, comment: str, log: str, array: str | None,
                   extra: Sequence[str]) -> list[str]:
    """Every sbatch option of one job (or array), each one argument: the user's --slurm-opt first, kit's after
    them (sbatch takes the last value of an option given twice, so kit's win even where ``check_slurm_opts``
    missed one). ``log`` is an ``--output`` pattern (``log_pattern``)."""
    opts = [f"--job-name={job_name}", f"--comment={check_value('the job comment', comment)}", f"--output={log}",
            "--export=ALL",
            f"--signal=B:TERM@{TERM_WARNING_S}", *alloc.options()]
    if array is not None:
        opts.append(f"--array={array}")
    return [*extra, *opts]


def kit_run_argv(python: str, *, out_dir: Path, trust: Sequence[Path], allow_unsigned: bool, allow_unpinned: bool,
                 key: Path | None, resume: Path | None = None) -> list[str]:
    """``kit run`` as the job runs it: every path absolute, the trust policy passed through (``trust``: the
    policy's files, ``kit.signing.trust.trust_policy``)."""
    argv = [python, "-P", "-m", "kit", "run", "--out", str(out_dir.resolve()), *trust_flags(trust)]
    argv += ["--allow-unsigned"] if allow_unsigned else []
    argv += ["--allow-unpinned"] if allow_unpinned else []
    argv += ["--key", str(key.resolve())] if key is not None else []
    argv += ["--resume", str(resume.resolve())] if resume is not None else []
    return argv


def batch_script(options: Sequence[str], run_argv: Sequence[str], manifests: Sequence[Path], *,
                 header: str) -> str:
    """The batch script: no ``#SBATCH`` line (the options are sbatch's arguments), ``set``, a comment that
    records the options, then ``exec kit run`` (one manifest, an array's task's manifest, or none for a
    resume)."""
    recorded = " ".join(shlex.quote(o) for o in options)
    lines = ["#!/bin/bash", *(f"# {h}" for h in header.splitlines()), "set -euo pipefail",
             f"# submitted as: sbatch {recorded} THIS-SCRIPT (options on sbatch's command line, none in this file)"]
    cmd = " ".join(shlex.quote(a) for a in run_argv)
    if len(manifests) > 1:
        lines.append("manifests=(" + " ".join(shlex.quote(str(p.resolve())) for p in manifests) + ")")
        lines.append(f'exec {cmd} "${{manifests[$SLURM_ARRAY_TASK_ID]}}"')
    elif manifests:
        lines.append(f"exec {cmd} {shlex.quote(str(manifests[0].resolve()))}")
    else:
        lines.append(f"exec {cmd}")
    return "\n".join(lines) + "\n"


def render_allocation(m: Manifest, slurm_opts: Sequence[str] = (), *, exclusive: bool = True) -> list[str]:
    """What `kit plan` shows for Slurm: the allocation the manifest asks for and the sbatch options kit submit
    would use (the log and comment paths are placeholders until the shared directory is known)."""
    alloc = allocation(m, exclusive=exclusive)
    opts = sbatch_options(alloc, job_name=f"{JOB_PREFIX}{m.name}", comment=f"{COMMENT_PREFIX}out=OUT",
                          log="OUT/slurm/%x-%j.out", array=None, extra=check_slurm_opts(slurm_opts))
    lines = [f"  slurm (kit submit): {alloc.describe()}", "    sbatch " + " ".join(shlex.quote(o) for o in opts)]
    if m.runtime == "slurm":
        r = m.ranks
        how = f"in pyxis container {r.container_image}" if r.container == "pyxis" else "as a process"
        lines.append(f"    ranks: one per node ({alloc.nodes}), each a job step {how}; rank 0 on the first node serves "
                     f"the API and listens on {r.dist_init_port} for the others; gates on every node before each "
                     "start and after each stop")
    return lines
