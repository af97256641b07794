"""`kit reproduce SOURCE --resume BUNDLE` finishes and judges only the bundle that a `kit reproduce` of this same source
started (kit.reproduce.resume). Review defect: it accepted the source itself (`kit archive B -o b.tar.gz; kit
reproduce b.tar.gz --resume B` exited 0 with "verdict: REPRODUCED ... x1.000", wrote reproduce.json, reproduce.md and
source/ into B, named B's own run id in its run.json and re-signed it, so `kit verify B` said ok), and any run of the
same manifest (a plain `kit run`, or a reproduction of another source), each then sealed as a "reproduction".

The refusals come from the library call before the plan check (the synthetic bundles' plan.json is not the one their
manifest makes), so ``dry_run`` reaches them without running anything."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from kit.bundle import PROVENANCE, Bundle, archive, sign_provenance
from kit.errors import ExitCode, UsageError
from kit.reproduce import ReproduceOptions, reproduce, seal
from kit.reproduce.run import _inputs, _run_options
from kit.reproduce.sealing import copy_source
from kit.reproduce.source import opened
from kit.signing import SigningKey

SignedBundle = Callable[..., Bundle]
PREDICATE = {"internalParameters": {"runtime": "process"}}


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _fix(source: Path) -> str:
    return (f"--resume takes only the bundle that `kit reproduce {source}` started (the command it printed when it "
            "stopped names it); to reproduce the source anew, leave --resume out (a new bundle under --out)")


def _refused(source: Path, resume: Path, trust: Path) -> UsageError:
    with pytest.raises(UsageError) as e:
        reproduce(ReproduceOptions(source=source, resume=resume, trust=[trust], allow_unsigned=True, dry_run=True))
    assert e.value.exit_code == ExitCode.USAGE and e.value.hint == _fix(source), e.value.hint
    return e.value


def _who(b: Bundle) -> str:
    return f"run {b.run_id} of demo, provenance sha256 {_sha(b.path(PROVENANCE))[:16]}..."


def _sealed_reproduction(source: Bundle, new: Bundle, trust: Path, runner: SigningKey) -> None:
    """``new`` sealed as a reproduction of ``source`` (run.json's reproduces, source/, re-signed), as kit reproduce
    seals its new bundle."""
    with opened(source.root, [trust], allow_untrusted=False) as src:
        seal(src, new.root, ReproduceOptions(source=source.root, key=runner.path, trust=[trust]))


def test_the_source_itself_is_refused_and_left_untouched(signed_bundle: SignedBundle, trust_file: Path,
                                                         tmp_path: Path) -> None:
    """The reviewer's case (from its archive), and the directory given twice."""
    b = signed_bundle()
    tar = tmp_path / "b.tar.gz"
    archive(b.root, tar)
    before = {p.relative_to(b.root): p.read_bytes() for p in b.root.rglob("*") if p.is_file()}
    for source in (tar, b.root):
        e = _refused(source, b.root, trust_file)
        assert e.message == (f"--resume {b.root}: this is the source bundle itself, or a copy of it (run {b.run_id}), "
                             "not a reproduction of it; kit reproduce never writes into its source"), e.message
    assert {p.relative_to(b.root): p.read_bytes() for p in b.root.rglob("*") if p.is_file()} == before


def test_a_plain_run_of_the_same_manifest_is_refused(signed_bundle: SignedBundle, trust_file: Path) -> None:
    """Another `kit run` of the same manifest (same bytes), never started by kit reproduce."""
    b, plain = signed_bundle(), signed_bundle("elsewhere")
    assert plain.path("manifest.yaml").read_bytes() == b.path("manifest.yaml").read_bytes()
    e = _refused(b.root, plain.root, trust_file)
    assert e.message == (f"--resume {plain.root}: not a reproduction: its signed run.json names no source and records "
                         "a `kit run`, not a `kit reproduce`"), e.message


def test_a_reproduction_of_another_source_is_refused(signed_bundle: SignedBundle, trust_file: Path,
                                                     runner: SigningKey) -> None:
    """Sealed (run.json's reproduces), and not sealed yet with the other source's provenance in source/ (as
    --until-decided copies it before its start checkpoint)."""
    b, other, new = signed_bundle(), signed_bundle("other"), signed_bundle("new")
    _sealed_reproduction(other, new, trust_file, runner)
    e = _refused(b.root, new.root, trust_file)
    assert e.message == (f"--resume {new.root}: a reproduction of another source ({_who(other)}, as its run.json's "
                         f"reproduces names it), not of {b.root} ({_who(b)})"), e.message

    looks = signed_bundle("looks")
    copy_source(other.root, looks)
    sign_provenance(looks, runner, predicate=PREDICATE)
    e = _refused(b.root, looks.root, trust_file)
    assert e.message == (f"--resume {looks.root}: a reproduction of another source (provenance sha256 "
                         f"{_sha(other.path(PROVENANCE))[:16]}..., as its source/provenance.dsse.json is), not of "
                         f"{b.root} ({_who(b)})"), e.message


@pytest.mark.parametrize("started", ["sealed", "source-copied", "argv", "library"])
def test_a_reproduction_of_this_source_is_resumed(signed_bundle: SignedBundle, trust_file: Path, runner: SigningKey,
                                                  tmp_path: Path, started: str) -> None:
    """What kit reproduce started from this source is still taken, from its directory or its archive: sealed, or not
    judged yet (its run.json records kit reproduce's command line, or from a library call its manifest name, or it
    holds the source's provenance in source/)."""
    b, new = signed_bundle(), signed_bundle("new")
    if started == "sealed":
        _sealed_reproduction(b, new, trust_file, runner)
    else:
        if started == "source-copied":
            copy_source(b.root, new)
        run = json.loads(new.path("run.json").read_bytes())
        if started == "argv":
            run["argv"] = ["kit", "reproduce", str(b.root), "--trust", str(trust_file)]
        if started == "library":
            run["argv"], run["manifest_source"] = [], str(tmp_path / "reproduce-source.yaml")
        new.write_json("run.json", run)
        sign_provenance(new, runner, predicate=PREDICATE)
    tar = tmp_path / "b.tar.gz"
    archive(b.root, tar)
    for source in (b.root, tar):
        opts = ReproduceOptions(source=source, resume=new.root, trust=[trust_file], allow_unsigned=True)
        with opened(source, [trust_file], allow_untrusted=False) as src:
            inputs = _inputs(src, opts, _run_options(opts, src))
        assert inputs.lm.raw == b.path("manifest.yaml").read_bytes()
