"""Which bundle ``kit reproduce SOURCE --resume BUNDLE`` may finish, judge and seal: only one that a `kit reproduce`
of this same source started, as the bundle's signed files (its provenance, else its verified checkpoints) say.

- Never the source itself (the same run id: a copy of it, an archive of it extracted, or the source re-signed):
  sealing it would make the original a "reproduction" of itself, re-signed, which `kit verify` would pass.
- Sealed once (the run ended and was judged): run.json's ``reproduces`` names its source by the sha256 of the
  source's ``provenance.dsse.json``, which must be this source's.
- Not sealed yet (a reproduction that stopped or failed before its verdict): it holds the source's provenance in
  ``source/`` from its start checkpoint (``RunOptions.prepare``; before 2026-12-07 only an ``--until-decided`` one),
  whose sha256 must be this source's; an older one without it names no source, so it must at least be kit
  reproduce's: its signed run.json records the command line ``kit reproduce``
  (a library call records none: then the manifest name kit reproduce records, ``reproduce-source.yaml``). Its
  manifest must be the source's, byte for byte (the caller checks it).
- Anything else (a plain ``kit run`` of the same manifest, or a reproduction of another source) is refused.
"""

from __future__ import annotations

from pathlib import Path

from kit.bundle import PROVENANCE, ResumeTrust
from kit.errors import UsageError
from kit.files.reproduce import SourceRef
from kit.files.run import RunFile
from kit.hints import Invocation
from kit.reproduce.sealing import SOURCE_DIR

ORIGIN = "reproduce-source.yaml"  # the manifest_source kit reproduce records (in the project: kit.reproduce.run)


def _who(run_id: str, experiment: str, provenance_sha256: str) -> str:
    return f"run {run_id} of {experiment or '?'}, provenance sha256 {provenance_sha256[:16]}..."


def started_by_reproduce(run: RunFile) -> bool:
    """Whether the signed run.json says `kit reproduce` started the run (its command line; none recorded: the manifest
    name kit reproduce records)."""
    if run.argv:
        return Invocation.of(run.argv).command == "reproduce"
    return Path(run.manifest_source or "").name == ORIGIN


def refuse_unless_reproduction_of(ref: SourceRef, root: Path, trust: ResumeTrust) -> None:
    """Refuse (exit 2) a ``--resume`` bundle ``root`` (``trust``: what its signatures vouch for) that is not a
    reproduction of the source ``ref`` started by kit reproduce (the rule: this module's docstring)."""
    run = trust.run
    source = _who(ref.run_id, ref.experiment, ref.provenance_sha256)
    fix = (f"--resume takes only the bundle that `kit reproduce {ref.path}` started (the command it printed when it "
           "stopped names it); to reproduce the source anew, leave --resume out (a new bundle under --out)")
    if run.run_id == ref.run_id:
        raise UsageError(f"--resume {root}: this is the source bundle itself, or a copy of it (run {run.run_id}), "
                         "not a reproduction of it; kit reproduce never writes into its source", hint=fix)
    named = run.reproduces.source if run.reproduces is not None else None
    copied = trust.files.get(f"{SOURCE_DIR}/{PROVENANCE}")
    if named is not None:
        other, what = named.provenance_sha256, \
            f"{_who(named.run_id, named.experiment, named.provenance_sha256)}, as its run.json's reproduces names it"
    elif copied is not None:  # --until-decided, not sealed yet: the source's provenance copied before its start
        other, what = copied[0], f"provenance sha256 {copied[0][:16]}..., as its {SOURCE_DIR}/{PROVENANCE} is"
    elif started_by_reproduce(run):
        return  # not judged yet, and started without --until-decided: it names no source until sealed
    else:
        raise UsageError(f"--resume {root}: not a reproduction: its signed run.json names no source and records a "
                         f"`kit {Invocation.of(run.argv).command or 'run'}`, not a `kit reproduce`", hint=fix)
    if other != ref.provenance_sha256:
        raise UsageError(f"--resume {root}: a reproduction of another source ({what}), not of {ref.path} ({source})",
                         hint=fix)
