"""Checkpoints: a signed statement per completed cell, chained to the one before; a resume trusts the verified
prefix of the chain, never an unsigned file (kit.bundle.checkpoints, kit.bundle.resume)."""

from __future__ import annotations

import base64
import errno
import json
import os
from pathlib import Path

import jsonschema
import pytest

from kit.bundle import (
    Bundle,
    Checkpointer,
    check_chain,
    read_chain,
    reconcile,
    resume_trust,
    runner_trust_line,
    sign_provenance,
)
from kit.bundle.checkpoints import Chain
from kit.bundle.names import envelope_bytes
from kit.errors import BundleError, ExitCode, storage_error
from kit.files.checkpoint import CheckpointFile, CheckpointStatement
from kit.files.schema import bundle_schema
from kit.plumbing.files import append_line
from kit.signing import SigningKey, sign_payload


def _cell(b: Bundle, cid: str, status: str, records: bytes = b'{"rid":"1"}\n') -> None:
    arm, rep = cid.rsplit("-r", 1)
    b.write_json(f"cells/{cid}/cell.json", {"id": cid, "arm": arm, "repeat": int(rep), "index": 0, "status": status})
    b.write_bytes(f"cells/{cid}/level-1/records.jsonl", records)


@pytest.fixture
def started(tmp_path: Path, runner: SigningKey) -> tuple[Bundle, Checkpointer]:
    """A bundle with its start checkpoint and one completed cell's."""
    b = Bundle.create(tmp_path / "results", "exp", run_id="abc123")
    b.write_bytes("manifest.yaml", b"name: exp\n")
    b.write_json("run.json", {"run_id": "abc123", "status": "running"})
    b.append_jsonl("gates.jsonl", {"phase": "preflight"})
    chk = Checkpointer(b, runner, Chain())
    chk.sign("start")
    _cell(b, "base-r1", "ok")
    chk.sign("cell", cell="base-r1", status="ok")
    return b, chk


def test_the_chain_folds_to_every_file_and_each_link_is_signed_and_chained(
        started: tuple[Bundle, Checkpointer], trust_file: Path) -> None:
    b, chk = started
    _cell(b, "oea-r1", "failed")
    chk.sign("cell", cell="oea-r1", status="failed")
    chain = read_chain(b.root, [trust_file])
    assert [lk.statement.predicate.kind for lk in chain.links] == ["start", "cell", "cell"]
    assert chain.stopped is None and chain.beyond == []
    assert chain.files == chk.current()  # the fold is the bundle
    assert json.loads(chain.run_json or b"")["run_id"] == "abc123"
    second = json.loads(base64.b64decode(json.loads((b.root / "checkpoints/000001.dsse.json").read_bytes())["payload"]))
    assert sorted(s["name"] for s in second["subject"]) == ["cells/base-r1/cell.json",
                                                           "cells/base-r1/level-1/records.jsonl"]
    CheckpointStatement.model_validate(second)
    # bundle.schema.json describes the file (the envelope) and, through contentSchema, its payload
    full = bundle_schema()
    envelope = json.loads((b.root / "checkpoints/000002.dsse.json").read_bytes())
    jsonschema.validate(envelope, {**full, "anyOf": [{"$ref": full["x-kit-files"]["checkpoints/*.dsse.json"]}]})
    payload = json.loads(base64.b64decode(envelope["payload"]))
    jsonschema.validate(payload, {**full, "anyOf": [{"$ref": "#/$defs/CheckpointStatement"}]})
    CheckpointFile.model_validate(envelope)


def test_an_altered_checkpoint_ends_the_trusted_prefix(started: tuple[Bundle, Checkpointer], trust_file: Path) -> None:
    b, chk = started
    _cell(b, "oea-r1", "ok")
    chk.sign("cell", cell="oea-r1", status="ok")
    p = b.root / "checkpoints/000001.dsse.json"
    env = json.loads(p.read_bytes())
    stmt = json.loads(base64.b64decode(env["payload"]))
    stmt["subject"][0]["digest"]["sha256"] = "0" * 64
    env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()
    p.write_text(json.dumps(env, indent=2, sort_keys=True) + "\n")
    chain = read_chain(b.root, [trust_file])
    assert len(chain.links) == 1 and "000001.dsse.json" in (chain.stopped or "")
    assert chain.beyond == ["checkpoints/000001.dsse.json", "checkpoints/000002.dsse.json"]
    assert "cells/base-r1/cell.json" not in chain.files


def test_a_gap_or_a_signer_the_policy_does_not_trust_ends_it(started: tuple[Bundle, Checkpointer], trust_file: Path,
                                                             stranger: SigningKey, tmp_path: Path) -> None:
    b, chk = started
    _cell(b, "oea-r1", "ok")
    chk.sign("cell", cell="oea-r1", status="ok")
    other = tmp_path / "other_signers"
    other.write_text(runner_trust_line(stranger) + "\n")
    assert read_chain(b.root, [other]).links == []  # nobody the policy trusts signed the start
    assert len(read_chain(b.root, None).links) == 3  # integrity only
    (b.root / "checkpoints/000001.dsse.json").unlink()
    chain = read_chain(b.root, [trust_file])
    assert len(chain.links) == 1 and chain.beyond == ["checkpoints/000002.dsse.json"]


def test_resume_keeps_complete_cells_and_sets_aside_every_unsigned_file(
        started: tuple[Bundle, Checkpointer], trust_file: Path) -> None:
    b, _ = started
    kept = {r: (b.root / r).read_bytes() for r in ("cells/base-r1/cell.json", "cells/base-r1/level-1/records.jsonl")}
    # what SIGKILL left: a partial cell, a cell.json that claims ok without a checkpoint, a rewritten run.json,
    # gate lines after the last checkpoint, a summary, a stray file
    _cell(b, "oea-r1", "running", b'{"rid":"2"}\n{"rid":')
    _cell(b, "base-r2", "ok")
    b.write_json("run.json", {"run_id": "abc123", "status": "failed"})
    append_line(b.root / "gates.jsonl", b'{"phase":"before"}\n')
    b.write_json("summary.json", {})
    b.write_bytes("notes.txt", b"planted\n")
    trust = resume_trust(b.root, [trust_file])
    assert not trust.sealed and "checkpoints 0-1 verified" in trust.note
    chk = Checkpointer(b, SigningKey.__new__(SigningKey), trust.chain)  # hashing only: nothing is signed here
    r = reconcile(b, trust, chk.current())
    assert r.complete == ["base-r1"]
    assert {(b.root / k).read_bytes() for k in kept} == set(kept.values())
    assert (b.root / "failed/oea-r1-a1/level-1/records.jsonl").read_bytes() == b'{"rid":"2"}\n{"rid":'
    assert (b.root / "failed/base-r2-a1/cell.json").exists() and not (b.root / "cells/base-r2").exists()
    assert json.loads((b.root / "run.json").read_bytes())["status"] == "running"  # the signed one, restored
    assert json.loads((b.root / "failed/unsigned-1/run.json").read_bytes())["status"] == "failed"
    assert (b.root / "gates.jsonl").read_bytes() == b'{"phase":"preflight"}\n'
    assert (b.root / "failed/unsigned-1/gates.jsonl").read_bytes() == b'{"phase":"before"}\n'
    assert (b.root / "failed/unsigned-1/notes.txt").exists() and not (b.root / "summary.json").exists()
    assert r.dropped == ["summary.json"] and len(r.set_aside) == 5 and r.restored


def test_resume_refuses_a_complete_cell_changed_since_its_checkpoint(started: tuple[Bundle, Checkpointer],
                                                                    trust_file: Path) -> None:
    b, chk = started
    (b.root / "cells/base-r1/level-1/records.jsonl").write_bytes(b'{"rid":"9"}\n')
    _cell(b, "oea-r1", "running")
    trust = resume_trust(b.root, [trust_file])
    with pytest.raises(BundleError) as e:
        reconcile(b, trust, chk.current())
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    assert "cells/base-r1/level-1/records.jsonl: sha256 differs from its checkpoint" in e.value.message
    assert (b.root / "cells/oea-r1").is_dir() and not (b.root / "failed").exists()  # nothing moved


@pytest.mark.parametrize("swap", ["cells", "cells/base-r1"])
def test_resume_refuses_a_directory_swapped_for_a_symlink_after_verification(
        started: tuple[Bundle, Checkpointer], trust_file: Path, tmp_path: Path, swap: str) -> None:
    b, chk = started
    trust = resume_trust(b.root, [trust_file])  # verified ...
    elsewhere = tmp_path / "elsewhere"
    os.rename(b.root / swap, elsewhere)  # ... then swapped: the files are the same bytes, elsewhere
    os.symlink(elsewhere, b.root / swap)
    with pytest.raises(BundleError, match="symbolic link"):
        reconcile(b, trust, Checkpointer(b, chk.key, trust.chain).current())
    with pytest.raises(BundleError, match="symbolic link"):
        Bundle.resume_at(b.root, "abc123")


def test_a_bundle_without_a_verified_checkpoint_is_not_resumed(tmp_path: Path, trust_file: Path) -> None:
    b = Bundle.create(tmp_path / "results", "exp", run_id="abc123")
    b.write_json("run.json", {"run_id": "abc123"})
    with pytest.raises(BundleError, match="stopped before its first checkpoint") as e:  # killed while it started
        resume_trust(b.root, [trust_file])
    assert "nothing was measured" in e.value.message and "kit run MANIFEST" in (e.value.hint or "")
    b.write_json("cells/base-r1/cell.json", {"id": "base-r1"})  # a cell, but no checkpoint: unsigned, refused
    with pytest.raises(BundleError, match=r"missing file: provenance\.dsse\.json") as e:
        resume_trust(b.root, [trust_file])
    assert "a run stopped before its first checkpoint measured nothing: start a new run" in (e.value.hint or "")
    (b.root / "checkpoints").mkdir()
    (b.root / "checkpoints/000000.dsse.json").write_text("{}")  # something, but nothing that verifies
    with pytest.raises(BundleError, match="no signed provenance and no verified checkpoint"):
        resume_trust(b.root, [trust_file])


def test_sealing_adds_the_end_checkpoint_and_verify_holds_the_chain_to_the_provenance(
        started: tuple[Bundle, Checkpointer], runner: SigningKey, trust_file: Path) -> None:
    b, chk = started
    b.write_json("run.json", {"run_id": "abc123", "status": "complete"})
    sign_provenance(b, runner, predicate={}, checkpoints=chk, status="complete")
    chain = read_chain(b.root, [trust_file])
    assert chain.links[-1].statement.predicate.kind == "end" and chain.links[-1].statement.predicate.status == "complete"
    subjects = {r: d for r, (d, _) in chk.current().items()}
    note, details, problems = check_chain(b.root, [trust_file], subjects)
    assert problems == [] and details["cells"] == ["base-r1"] and "3 checkpoints" in note
    _, _, problems = check_chain(b.root, [trust_file], {**subjects, "cells/base-r1/cell.json": "1" * 64,
                                                        "extra.txt": "2" * 64})
    assert problems == ["checkpoint chain: extra.txt is not in any checkpoint",
                        "checkpoint chain: cells/base-r1/cell.json: sha256 differs from its checkpoint"]


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO])
def test_a_full_or_failing_disk_is_its_own_clean_error(code: int) -> None:
    e = storage_error(OSError(code, os.strerror(code), "/results/x/cell.json"))
    assert e is not None and e.exit_code == ExitCode.STORAGE == 14
    assert "/results/x/cell.json" in e.message and f"[Errno {code}]" in e.message
    assert storage_error(OSError(errno.ECONNREFUSED, "refused")) is None and storage_error(ValueError()) is None
    refused = storage_error(OSError(errno.EACCES, "denied", "/results/x"))  # a path the file system refuses kit
    assert refused is not None and "make it writable" in (refused.hint or "") and "free space" not in (refused.hint or "")


def test_a_sealed_bundle_with_checkpoints_resumes_from_its_provenance(started: tuple[Bundle, Checkpointer],
                                                                     runner: SigningKey, trust_file: Path) -> None:
    b, chk = started
    _cell(b, "oea-r1", "failed")
    chk.sign("cell", cell="oea-r1", status="failed")
    sign_provenance(b, runner, predicate={}, checkpoints=chk, status="failed")
    trust = resume_trust(b.root, [trust_file])
    assert trust.sealed and trust.note.startswith("verified; TRUSTED")
    r = reconcile(b, trust, Checkpointer(b, runner, trust.chain).current())
    assert r.complete == ["base-r1"] and r.set_aside == ["cells/oea-r1 -> failed/oea-r1-a1: not a cell a verified "
                                                         "checkpoint holds as complete"]
    assert r.restored == [] and r.dropped == []


def test_a_resume_of_a_directory_that_is_no_bundle_never_suggests_removing_it(tmp_path: Path,
                                                                               trust_file: Path) -> None:
    """Was: `kit run --resume /etc` (or a mistyped ~) said "this directory holds nothing else and can go: rm -r /etc".
    The removal is suggested only for a bundle that measured nothing: its own run.json, its run id in its name."""
    home = tmp_path / "home"
    (home / "thesis").mkdir(parents=True)
    (home / "thesis" / "chapter1.tex").write_text("years of work\n")
    with pytest.raises(BundleError, match="not a kit bundle") as e:
        resume_trust(home, [trust_file])
    assert "rm -r" not in str(e.value)
    (home / "run.json").write_text('{"run_id": "abc123"}')  # a run.json, but not this directory's own
    with pytest.raises(BundleError, match="stopped before its first checkpoint") as e:
        resume_trust(home, [trust_file])
    assert "rm -r" not in str(e.value)
    b = Bundle.create(tmp_path / "results", "exp", run_id="abc123")  # a real one, killed while it started
    b.write_json("run.json", {"run_id": "abc123", "argv": ["kit", "run", "m.yaml"]})
    b.write_bytes("manifest.yaml", b"name: exp\n")
    with pytest.raises(BundleError, match="stopped before its first checkpoint") as e:
        resume_trust(b.root, [trust_file])
    assert f"rm -r {b.root}" in (e.value.hint or "") and "kit run m.yaml" in (e.value.hint or "")
    # killed sooner still: the manifest's copy is all it wrote (a review: 'not a kit bundle ... give the bundle
    # directory kit run printed', which it was)
    c = Bundle.create(tmp_path / "results", "exp", run_id="def456")
    c.write_bytes("manifest.yaml", b"name: exp\n")
    with pytest.raises(BundleError, match="having written only its copy of the manifest") as e:
        resume_trust(c.root, [trust_file])
    assert f"rm -r {c.root}" in (e.value.hint or "") and "kit run MANIFEST" in (e.value.hint or "")
    (home / "manifest.yaml").write_text("name: x\n")  # a folder of the user's that happens to hold a manifest
    (home / "run.json").unlink()
    with pytest.raises(BundleError, match="not a kit bundle") as e:
        resume_trust(home, [trust_file])
    assert "rm -r" not in str(e.value)


def test_a_checkpoint_write_cut_by_sigkill_is_a_temp_file_not_a_checkpoint_beyond_the_chain(
        started: tuple[Bundle, Checkpointer], trust_file: Path) -> None:
    """The SIGKILL test of a clean clone: the kill came while checkpoint 2 was written, and the resume set its temp
    file aside as "after the verified checkpoints" while opening the bundle removed it: internal error on the move."""
    b, _ = started
    (b.root / "checkpoints" / ".000002.dsse.json.tmp-19423-4cff1d41").write_bytes(b'{"payload')
    trust = resume_trust(b.root, [trust_file])
    assert trust.chain.beyond == [] and trust.chain.stopped is None and len(trust.chain.links) == 2


def test_verify_of_a_bundle_never_sealed_prints_a_resume_command_that_pastes(
        tmp_path: Path, started: tuple[Bundle, Checkpointer], trust_file: Path) -> None:
    """The hint is shell-quoted and carries the policy the check used, so the resume it prints trusts the runner the
    checkpoints were verified with (a bare `kit run --resume DIR` falls back to the user's own policy). More in
    tests/bundle/test_verify_unsealed.py."""
    import shlex

    import click

    from kit.cli import main
    from kit.verify import verify_target

    b, _ = started
    odd = b.root.rename(b.root.with_name("a dir; with 'quotes'"))  # a name a shell would split or run
    with pytest.raises(BundleError) as e:
        verify_target(odd, [trust_file])
    hint = e.value.hint or ""
    assert "its run never ended" in hint, hint
    argv = shlex.split(hint.split("`")[1])
    assert argv == ["kit", "run", "--resume", str(odd.resolve()), "--trust-only", str(trust_file.resolve())]
    # the CLI takes it as printed (parsed under kit's own group context: a command parsed without it caches a
    # help option of click's defaults, which docs/cli.md's generator then printed for `kit run`)
    top = click.Context(main, info_name="kit", **main.context_settings)
    ctx = main.commands["run"].make_context("run", argv[2:], parent=top)
    assert str(ctx.params["resume"]) == str(odd.resolve()) and ctx.params["trust_only"], ctx.params


def test_a_signed_checkpoint_whose_run_json_is_not_base64_is_exit_9(started: tuple[Bundle, Checkpointer],
                                                                     runner: SigningKey, trust_file: Path) -> None:
    """The run.json copy a checkpoint carries is decoded only after its signature verified; a signer's malformed
    copy was an internal error (binascii.Error) at `kit verify` and `kit reproduce`."""
    b, _ = started
    first = b.root / "checkpoints/000000.dsse.json"
    stmt = json.loads(base64.b64decode(json.loads(first.read_bytes())["payload"]))
    stmt["predicate"]["run_json"] = "@@@ not base64"
    body = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()
    first.write_bytes(envelope_bytes(sign_payload(body, runner)))
    with pytest.raises(BundleError, match=r"its copy of run\.json is not base64"):
        read_chain(b.root, [trust_file])
