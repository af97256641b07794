"""`kit verify` of a bundle whose run never ended checks its files against the signed checkpoints before it prints
the command that finishes it (kit.verify.finishing, kit.bundle.resume.resume_refusals).

Review defect 1: a killed run's copy with a checkpointed cell's records.jsonl edited (or a file added to a finished
cell) got "its signed checkpoints let `kit run --resume ...` finish it", and that resume stopped at once (exit 9:
"records.jsonl: sha256 differs from its checkpoint"). Now verify names what the resume would refuse, and what to do
instead; each case is checked against the resume's own refusal (``reconcile``, ``ResumeTrust.signed_bytes``), so
the two cannot drift apart."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kit.bundle import Bundle, Checkpointer, reconcile, resume_trust
from kit.bundle.checkpoints import Chain
from kit.errors import BundleError, ExitCode
from kit.signing import SigningKey
from kit.verify import verify_target

RECORDS = "cells/base-r1/level-1/records.jsonl"


@pytest.fixture
def killed(tmp_path: Path, runner: SigningKey) -> Bundle:
    """A run killed (SIGKILL) after its start checkpoint and one completed cell, and a second cell begun."""
    b = Bundle.create(tmp_path / "results", "exp", run_id="abc123")
    b.write_bytes("manifest.yaml", b"name: exp\n")
    b.write_json("plan.json", {"cells": []})
    b.write_json("run.json", {"run_id": "abc123", "status": "running", "argv": ["kit", "run", "exp.yaml"]})
    chk = Checkpointer(b, runner, Chain())
    chk.sign("start")
    b.write_json("cells/base-r1/cell.json", {"id": "base-r1", "arm": "base", "repeat": 1, "index": 0,
                                             "status": "ok"})
    b.write_bytes(RECORDS, b'{"rid":"1"}\n')
    chk.sign("cell", cell="base-r1", status="ok")
    b.write_json("cells/oea-r1/cell.json", {"id": "oea-r1", "arm": "oea", "repeat": 1, "index": 1,
                                            "status": "running"})
    return b


def _verify(b: Bundle, trust_file: Path) -> BundleError:
    with pytest.raises(BundleError) as e:
        verify_target(b.root, [trust_file])
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    return e.value


def _resume_refusal(b: Bundle, trust_file: Path) -> str:
    """What the resume itself says, as `kit run --resume` checks it: the inputs it reads as signed, then reconcile."""
    trust = resume_trust(b.root, [trust_file])
    with pytest.raises(BundleError) as e:
        for rel in ("manifest.yaml", "plan.json"):
            trust.signed_bytes(b.root, rel)
        reconcile(b, trust, Checkpointer(b, SigningKey.__new__(SigningKey), trust.chain).current())
    return e.value.message


@pytest.mark.parametrize(("change", "problem"), [
    ("edit", f"{RECORDS}: sha256 differs from its checkpoint"),
    ("add", "cells/base-r1/extra.txt: in a complete cell, but not in its checkpoint"),
    ("delete", f"{RECORDS}: missing (its checkpoint vouches for it)"),
    ("plan", "plan.json: sha256 differs from its checkpoint"),
])
def test_verify_names_what_the_resume_would_refuse(killed: Bundle, trust_file: Path, change: str,
                                                   problem: str) -> None:
    rec = killed.root / RECORDS
    if change == "edit":
        rec.write_bytes(b'{"rid":"9"}\n')
    elif change == "add":
        (killed.root / "cells/base-r1/extra.txt").write_bytes(b"mine\n")
    elif change == "delete":
        rec.unlink()
    else:
        (killed.root / "plan.json").write_bytes(b'{"cells": [1]}\n')
    err = _verify(killed, trust_file)
    assert f"{problem} (a resume refuses this)" in err.message, err.message
    hint = err.hint or ""
    assert "a resume refuses it (exit 9)" in hint and "untouched copy" in hint, hint
    assert "`kit run exp.yaml`" in hint, hint  # or start again, as the signed run.json records the start
    # the resume, run as `kit run --resume` runs it, refuses the same file
    assert problem.split(": ", 1)[0] in _resume_refusal(killed, trust_file)


def test_files_a_resume_sets_aside_still_get_the_command_that_finishes_the_run(killed: Bundle,
                                                                               trust_file: Path) -> None:
    """A stray file, a partial cell or gate lines after the last checkpoint are what a resume puts aside (never a
    refusal): verify still prints the command, and the resume accepts the bundle."""
    (killed.root / "notes.txt").write_bytes(b"planted\n")
    (killed.root / "cells/oea-r1/level-1").mkdir(parents=True)
    (killed.root / "cells/oea-r1/level-1/records.jsonl").write_bytes(b'{"rid":')
    err = _verify(killed, trust_file)
    assert "missing file: provenance.dsse.json" in err.message and "resume refuses" not in err.message
    hint = err.hint or ""
    assert hint.startswith("its run never ended; its signed checkpoints let `kit run --resume"), hint
    assert shlex.split(hint.split("`")[1])[:4] == ["kit", "run", "--resume", str(killed.root.resolve())]
    trust = resume_trust(killed.root, [trust_file])
    reconcile(killed, trust, Checkpointer(killed, SigningKey.__new__(SigningKey), trust.chain).current())
