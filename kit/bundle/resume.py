"""What a resume may believe of a bundle, and putting the bundle back to exactly that.

``resume_trust``: a bundle whose run ended (signed provenance) must verify whole, as before; one whose run never
ended (SIGKILL, power loss, a full disk) is believed as far as the verified prefix of its checkpoint chain
vouches (``kit.bundle.checkpoints``), never further. ``reconcile`` (under the bundle's lock) then makes the
directory hold what was vouched for and nothing else: a cell is complete only when a checkpoint holds its files
byte for byte and its signed cell.json says ok (a complete cell changed since: exit 9); every other cell
directory is moved aside to ``failed/<id>-a<n>`` (records are never deleted); run.json is restored from its
signed copy and gates.jsonl cut back to its signed length; any other file no checkpoint vouches for is moved to
``failed/unsigned-<k>/``; summary, report and plots are dropped (the run's end recomputes them). Every move is
returned, for run.json's record of the resume.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from kit.bundle.checkpoints import Chain, Digests, checkpoint_files, read_chain, vouched_files
from kit.bundle.layout import Bundle, is_temp_name
from kit.bundle.names import PROVENANCE, walk
from kit.bundle.policy import SignerDecision, decide_trust
from kit.bundle.subjects import subject_sizes
from kit.bundle.verify import check_files, fail, signed_parts
from kit.errors import BundleError
from kit.files.cell import CellFile
from kit.files.read import MAX_FILE_BYTES, read_file
from kit.files.run import RunFile
from kit.plumbing.files import atomic_write, fsync_dir, read_bounded, sha256_file
from kit.plumbing.jsontypes import loads
from kit.signing import policy_files, sha256_hex

MAX_UNSTARTED_ENTRIES = 1000  # run.json, manifest, plan, environment, a workload's request files
DERIVED = ("summary.json", "report.md")  # and plots/: recomputed from the records when the run ends
_BUNDLE_NAME = re.compile(r".+-\d{8}T\d{6}Z-[0-9a-f]{6}")  # <experiment>-<UTC time>-<run id>, as kit run names it


@dataclass
class ResumeTrust:
    """What a resume believes: the files vouched for (name -> sha256, size), the signed run.json, the chain
    to continue, and the line that says who vouched."""

    files: Digests
    run_json: bytes
    chain: Chain
    note: str
    sealed: bool  # the run ended and its provenance verified: every file must be as signed

    @property
    def run(self) -> RunFile:
        return RunFile.model_validate_json(self.run_json)

    def signed_bytes(self, root: Path, rel: str) -> bytes:
        """The bytes of ``rel`` as read now, which must be the vouched-for ones (exit 9 otherwise)."""
        return _read_signed(root, rel, self.files)


def _read_signed(root: Path, rel: str, files: Digests) -> bytes:
    try:
        if (root / rel).is_symlink():
            raise OSError(f"{rel} is a symbolic link")
        data = read_bounded(root / rel, MAX_FILE_BYTES)
    except (OSError, ValueError) as e:
        raise BundleError(f"{root}: cannot read {rel} ({e})", hint=f"check it with `kit verify {root}`") from None
    if rel not in files or sha256_hex(data) != files[rel][0]:
        raise BundleError(f"{root}: {rel} is not the one its signed provenance or checkpoints vouch for",
                          hint="kit resumes only what a trusted runner signed; get an untouched copy")
    return data


def resume_trust(root: Path, trust: list[Path]) -> ResumeTrust:
    """The signed provenance when the run ended (present, valid, trusted, matching every file); else the
    verified prefix of the checkpoints, signed by keys the policy allows for kit-bundle. Neither: exit 9."""
    label = str(root)
    if root.is_symlink():
        raise BundleError(f"{root}: is a symbolic link; give the bundle's own directory ({root.resolve()})")
    policy = policy_files(trust)
    if (root / PROVENANCE).exists() or (root / PROVENANCE).is_symlink():
        signer, body, subjects = _sealed(root, policy)
        sizes = subject_sizes(_statement(body))
        files = {rel: (d, sizes.get(rel, -1)) for rel, d in subjects.items() if vouched_files(rel)}
        chain = read_chain(root, None)  # covered by the provenance just verified
        return ResumeTrust(files, _read_signed(root, "run.json", files), chain, f"verified; {signer.text}",
                           sealed=True)
    if not checkpoint_files(root):
        _never_started(root)
    chain = read_chain(root, policy)
    hint = ("kit resumes only bundles whose signed provenance verifies as trusted, or whose checkpoints do; a run "
            "stopped before its first checkpoint measured nothing: start a new run")
    if not chain.links and not chain.beyond:
        signed_parts(root, label, hint)  # no provenance, no checkpoint: "missing file: provenance.dsse.json"
    if not chain.links or chain.run_json is None or "run.json" not in chain.files:
        why = f" ({chain.stopped})" if chain.stopped else ""
        raise fail(label, [f"no signed provenance and no verified checkpoint{why}: nobody vouches for its files"],
                   hint=hint)
    cells = sum(1 for lk in chain.links if lk.statement.predicate.kind == "cell")
    tail = f"; not trusted from {chain.stopped}" if chain.stopped else ""
    note = (f"not sealed (the run never ended); checkpoints 0-{len(chain.links) - 1} verified ({cells} after a cell), "
            f"signed by {', '.join(sorted({fp for lk in chain.links for fp in lk.signers}))}{tail}")
    return ResumeTrust(dict(chain.files), chain.run_json, chain, note, sealed=False)


def _never_started(root: Path) -> None:
    """A kit killed (SIGKILL, the OOM killer, power loss) while it started a run, before its first checkpoint
    (``start``, signed before any image is built or server started): no signature and no cell, so nothing was
    measured and nothing was started. Exit 9 with the command that runs it again (from its unsigned run.json)."""
    if (root / "cells").is_dir() and any((root / "cells").iterdir()):
        return  # cells without any checkpoint: the generic refusal names what is unsigned
    if not (root / "run.json").is_file() and (root / "manifest.yaml").is_file() and _BUNDLE_NAME.fullmatch(root.name) \
            and _only_kit_files(root):  # killed in its first milliseconds: the manifest's copy is all it wrote
        raise BundleError(f"{root}: stopped before its first checkpoint, having written only its copy of the manifest "
                          "(the kit that started it was killed at once): nothing was measured, nothing to resume",
                          hint="run the manifest again as you started it (`kit run MANIFEST ...`); this directory "
                          f"holds nothing else and can go: rm -r {shlex.quote(str(root))}")
    if not (root / "run.json").is_file():  # not a bundle at all (a mistyped path): never suggest removing it
        raise BundleError(f"{root}: not a kit bundle (no run.json, no checkpoint, no provenance): nothing to resume",
                          hint="give the bundle directory `kit run` printed (bundle: <out>/<experiment>-<time>-<id>)")
    again = "run the manifest again as you started it (`kit run MANIFEST ...`)"
    try:
        run = RunFile.model_validate_json(read_bounded(root / "run.json", MAX_FILE_BYTES))
        argv, run_id = run.argv, run.run_id
    except (OSError, ValueError):
        argv, run_id = [], None
    if argv[:2] == ["kit", "run"] and "--resume" not in argv:
        again = f"run it again as it was started (its unsigned run.json records, from where it ran): {shlex.join(argv)}"
    if run_id and root.name.endswith(f"-{run_id}") and _only_kit_files(root):
        again += f"; this directory holds nothing else and can go: rm -r {shlex.quote(str(root))}"
    raise BundleError(f"{root}: stopped before its first checkpoint (the kit that started it was killed while it "
                      "started: SIGKILL, the OOM killer, power loss): no cell had started and nothing was measured, "
                      "so there is nothing to resume", hint=again)


def _only_kit_files(root: Path) -> bool:
    """Whether ``root`` holds only what a run writes before its first checkpoint: a few regular files and folders
    (no link, nothing special), so that the `rm -r` kit suggests can only remove a bundle that measured nothing."""
    try:
        dirs, files = walk(root)
    except (BundleError, OSError):
        return False
    return len(dirs) + len(files) <= MAX_UNSTARTED_ENTRIES


def verify_integrity(root: Path) -> int:
    """Only what must hold before kit re-renders a bundle (`kit report`): every file matches the signed
    provenance and every signature verifies; trust and summary.json are not judged. Returns the number of
    files."""
    label = str(root)
    signed = signed_parts(root, label, "get an untouched copy of the bundle")
    check_files(root, sorted(f for f in signed.on_disk if f != PROVENANCE), signed.subjects, label, signed.sizes)
    return len(signed.subjects)


def verify_for_resume(root: Path, trust: list[Path], *, temp_files: bool = False) -> SignerDecision:
    """Before kit re-signs a finished bundle (`kit report`): the provenance must be present, valid, signed by a
    key the policy allows for kit-bundle, and match every file. Anything else: exit 9 naming why. ``temp_files``:
    the temp files of interrupted writes are left out of the match (the caller removes them next)."""
    return _sealed(root, policy_files(trust), temp_files=temp_files)[0]


def _sealed(root: Path, policy: list[Path], *, temp_files: bool = False
            ) -> tuple[SignerDecision, bytes, dict[str, str]]:
    label = str(root)
    env, body, subjects, on_disk, sizes = signed_parts(
        root, label, "kit resumes only bundles whose signed provenance verifies as trusted; start a new run")
    signer = decide_trust(env, body, policy, label)
    files = [f for f in on_disk if f != PROVENANCE and not (temp_files and is_temp_name(f))]
    check_files(root, sorted(files), subjects, label, sizes)
    return signer, body, subjects


def _statement(body: bytes) -> dict[str, object]:
    out = loads(body)
    return out if isinstance(out, dict) else {}


@dataclass
class Reconciled:
    complete: list[str] = field(default_factory=list)  # cells kept as checkpointed
    set_aside: list[str] = field(default_factory=list)  # "FROM -> TO: why"
    dropped: list[str] = field(default_factory=list)  # derived files removed (recomputed at the end)
    restored: list[str] = field(default_factory=list)  # files put back as signed
    signed_failed: dict[str, str] = field(default_factory=dict)  # cell -> failed/<id>-a<n>: a signed, failed attempt


def reconcile(bundle: Bundle, trust: ResumeTrust, current: Digests) -> Reconciled:
    """Make the bundle hold what ``trust`` vouches for (``current``: every file as hashed now, under the
    lock). A changed or missing file of a complete cell, or of the run's own inputs: exit 9, nothing moved."""
    problems, moves, out = _reconciliation(bundle.root, trust, current)
    if problems:
        raise fail(str(bundle.root), problems, hint="kit resumes only what its signed checkpoints vouch for; "
                                                     "get an untouched copy of the bundle, or start a new run")
    signed, aside = trust.files, _free_dir(bundle.root)
    _apply_all(bundle, moves, signed, out)
    for rel in out.dropped:
        (bundle.root / rel).unlink()
    if current.get("run.json", (None,))[0] != signed["run.json"][0]:
        if "run.json" in current:
            out.set_aside.append(_apply(bundle, "run.json", f"{aside}/run.json", "not the signed run.json", signed))
        atomic_write(bundle.root / "run.json", trust.run_json)
        out.restored.append(f"run.json (as checkpoint {len(trust.chain.links) - 1} holds it)")
    for beyond in trust.chain.beyond:
        out.set_aside.append(_apply(bundle, beyond, f"{aside}/{beyond}", f"after the verified checkpoints "
                                    f"({trust.chain.stopped})", signed))
    return out


SIGNED_INPUTS = ("manifest.yaml", "plan.json")  # read as signed before anything is reconciled (and the signature)


def resume_refusals(root: Path, chain: Chain) -> list[str]:
    """What a resume of the unsealed bundle ``root`` would refuse (exit 9) under the verified prefix ``chain``
    (which holds a signed run.json), found without changing anything and without its lock (`kit verify`, before it
    prints the command that finishes the run): the run's inputs it reads as signed, and what ``reconcile`` refuses
    (a complete cell's file changed, added or missing; a vouched-for file gone)."""
    try:
        _, on_disk = walk(root)
        current = {rel: sha256_file(root / rel) for rel in sorted(on_disk) if vouched_files(rel)}
        trust = ResumeTrust(dict(chain.files), chain.run_json or b"", chain, "", sealed=False)
        problems, _, _ = _reconciliation(root, trust, current)
    except BundleError as e:
        return [e.message]
    except OSError as e:
        return [f"unreadable: {e}"]
    signed = [*SIGNED_INPUTS, *(["manifest.yaml.sig"] if "manifest.yaml.sig" in chain.files else [])]
    first = [f"{rel}: {_difference(rel, current, chain.files) if rel in chain.files else 'no checkpoint names it'}"
             for rel in signed if current.get(rel, (None,))[0] != chain.files.get(rel, (None,))[0]]
    return first + [p for p in problems if p.split(":", 1)[0] not in signed]


def _reconciliation(root: Path, trust: ResumeTrust, current: Digests
                    ) -> tuple[list[str], list[tuple[str, str, str]], Reconciled]:
    """What ``reconcile`` finds, changing nothing: the problems that refuse the resume, the moves (from, to, why)
    that put the rest back to what the checkpoints vouch for, and what it keeps and drops."""
    signed, out = trust.files, Reconciled()
    problems: list[str] = []
    moves: list[tuple[str, str, str]] = []  # (from, to, why)
    for cid in _cell_dirs(root):
        prefix = f"cells/{cid}/"
        mine = {r: v for r, v in current.items() if r.startswith(prefix)}
        theirs = {r: v for r, v in signed.items() if r.startswith(prefix)}
        if not _complete(root, prefix + "cell.json", mine, theirs):
            moves.append((f"cells/{cid}", "", "not a cell a verified checkpoint holds as complete"))
            if mine and {r: v[0] for r, v in mine.items()} == {r: v[0] for r, v in theirs.items()}:
                out.signed_failed[cid] = ""  # every file as signed: a --redo failed records it (kit.bundle.redo)
            continue
        problems += [f"{r}: {_difference(r, mine, theirs)}" for r in sorted(set(mine) | set(theirs))
                     if mine.get(r, (None,))[0] != theirs.get(r, (None,))[0]]
        out.complete.append(cid)
    aside = _free_dir(root)
    for rel in sorted(r for r in current if not r.startswith("cells/")):
        if rel in signed and signed[rel][0] == current[rel][0]:
            continue
        if rel in DERIVED or rel.startswith("plots/"):
            out.dropped.append(rel)
        elif trust.sealed:
            problems.append(f"{rel}: not as signed")
        elif rel == "gates.jsonl" and rel in signed and _signed_prefix(root / rel, signed[rel]):
            moves.append((rel, f"{aside}/{rel}", "lines after its last checkpoint"))
        elif rel != "run.json":
            moves.append((rel, f"{aside}/{rel}", "no verified checkpoint vouches for it"))
    for rel in sorted(r for r in signed if r not in current and not r.startswith("cells/")):
        if rel not in DERIVED and not rel.startswith("plots/") and rel != "run.json":
            problems.append(f"{rel}: missing (a checkpoint vouches for it)")
    return problems, moves, out


def _difference(rel: str, mine: Digests, theirs: Digests) -> str:
    if rel not in theirs:
        return "in a complete cell, but not in its checkpoint"
    return "missing (its checkpoint vouches for it)" if rel not in mine else "sha256 differs from its checkpoint"


def _cell_dirs(root: Path) -> list[str]:
    d = root / "cells"
    if d.is_symlink():
        raise BundleError(f"{d}: is a symbolic link; a bundle holds only regular files and directories")
    if not d.is_dir():
        return []
    out = []
    for e in sorted(os.scandir(d), key=lambda e: e.name):
        if e.is_symlink() or not e.is_dir(follow_symlinks=False):
            raise BundleError(f"cells/{e.name}: not a directory (a symbolic link?); kit resumes no such bundle")
        out.append(e.name)
    return out


def _complete(root: Path, cell_json: str, mine: Digests, theirs: Digests) -> bool:
    """A cell is complete when its cell.json is the checkpointed one and says ok."""
    if cell_json not in theirs or mine.get(cell_json, (None,))[0] != theirs[cell_json][0]:
        return False
    return read_file(root, cell_json, CellFile).status == "ok"


def _signed_prefix(path: Path, signed: tuple[str, int]) -> bool:
    digest, size = signed
    if size < 0 or path.stat().st_size < size:
        return False
    with open(path, "rb") as f:
        return sha256_hex(f.read(size)) == digest


def _free_dir(root: Path) -> str:
    k = 1
    while (root / "failed" / f"unsigned-{k}").exists():
        k += 1
    return f"failed/unsigned-{k}"


def _apply_all(bundle: Bundle, moves: list[tuple[str, str, str]], signed: Digests, out: Reconciled) -> None:
    for frm, to, why in moves:
        line = _apply(bundle, frm, to, why, signed)
        out.set_aside.append(line)
        if (cid := frm.removeprefix("cells/")) in out.signed_failed:
            out.signed_failed[cid] = line.split(" -> ", 1)[1].split(":", 1)[0]  # failed/<id>-a<n>


def _apply(bundle: Bundle, frm: str, to: str, why: str, signed: Digests) -> str:
    """Move ``frm`` aside (a cell directory: ``failed/<id>-a<n>``); gates.jsonl: copy the unsigned tail, then cut
    the file back to its signed length."""
    if frm.startswith("cells/"):
        dst = bundle.move_failed_attempt(frm.split("/", 1)[1])
        return f"{frm} -> {dst.relative_to(bundle.root).as_posix()}: {why}"
    src, dst = bundle.root / frm, bundle.root / to
    dst.parent.mkdir(parents=True, exist_ok=True)
    if frm == "gates.jsonl" and frm in signed:
        size = signed[frm][1]
        with open(src, "rb") as f:
            f.seek(size)
            atomic_write(dst, f.read())
        os.truncate(src, size)
        fd = os.open(src, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return f"{frm} (bytes {size}-) -> {to}: {why}"
    os.rename(src, dst)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)
    return f"{frm} -> {to}: {why}"
