"""Checkpoints: a signed statement per completed cell, chained to the one before.

Provenance is signed when a run ends; a run that never ends (SIGKILL, the OOM killer, a node crash, power loss)
would leave nothing signed. So the runner signs as it goes: at the start, after every cell, at a resume and at
the end, ``checkpoints/<n>.dsse.json`` (``kit.files.checkpoint``) names the files new or changed since
checkpoint n-1 and the sha256 of checkpoint n-1's bytes. Folding the chain gives every file the runner vouched
for; a resume trusts the longest prefix of the chain that verifies (signatures under the user's policy, links,
sequence, run id) and nothing else (``kit.bundle.resume``); ``kit verify`` checks the whole chain against the
bundle (``check_chain``).
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kit.bundle.layout import Bundle, is_temp_name
from kit.bundle.names import PROVENANCE, envelope_bytes, rel_problem, walk
from kit.bundle.subjects import add_sizes
from kit.errors import BundleError, SignatureError
from kit.files import JsonObject
from kit.files.checkpoint import CHECKPOINT_PREDICATE, CheckpointPredicate, CheckpointStatement
from kit.plumbing.clock import utc_now
from kit.plumbing.files import read_bounded, sha256_file
from kit.signing import (
    NS_BUNDLE,
    SigningKey,
    check_envelope,
    load_trust,
    parse_envelope,
    sha256_hex,
    sign_payload,
    statement,
)

CHECKPOINTS = "checkpoints"
MAX_CHECKPOINT_BYTES = 64 << 20
MAX_CHECKPOINTS = 1_000_000
_NAME = re.compile(r"^(\d{6})\.dsse\.json$")

Digests = dict[str, tuple[str, int]]  # rel -> (sha256, size)


def checkpoint_rel(seq: int) -> str:
    return f"{CHECKPOINTS}/{seq:06d}.dsse.json"


def vouched_files(rel: str) -> bool:
    """Whether a checkpoint names ``rel``: every file but the checkpoints, the final provenance and temp files."""
    return not rel.startswith(CHECKPOINTS + "/") and rel != PROVENANCE and not is_temp_name(rel)


@dataclass
class Link:
    seq: int
    digest: str  # sha256 of the checkpoint file's bytes
    statement: CheckpointStatement
    signers: list[str]  # fingerprints whose signatures verified (the trusted ones when a policy was given)


@dataclass
class Chain:
    """The verified prefix of a bundle's checkpoints and what it vouches for."""

    links: list[Link] = field(default_factory=list)
    files: Digests = field(default_factory=dict)  # the fold: every file vouched for, as last vouched for
    run_json: bytes | None = None  # the last signed run.json (embedded in the checkpoint that named it)
    stopped: str | None = None  # why the prefix ends before the last checkpoint file (None: all verified)
    beyond: list[str] = field(default_factory=list)  # checkpoint files after the verified prefix

    @property
    def last_digest(self) -> str | None:
        return self.links[-1].digest if self.links else None

    @property
    def run_id(self) -> str | None:
        return self.links[0].statement.predicate.run_id if self.links else None


def checkpoint_files(root: Path) -> list[str]:
    """The names under checkpoints/ (sorted), without the temp files of interrupted writes (a SIGKILL while one
    was written left ``.000002.dsse.json.tmp-PID-N``: it was set aside as beyond the chain while the resume removed
    it, and the resume failed on the move); a symlink or a special file there is refused."""
    d = root / CHECKPOINTS
    if not d.exists() and not d.is_symlink():
        return []
    if d.is_symlink() or not d.is_dir():
        raise BundleError(f"{d}: not a directory (a symbolic link?); kit writes checkpoints into a directory")
    return sorted(e.name for e in os.scandir(d) if not is_temp_name(e.name))


def read_chain(root: Path, policy: Sequence[Path] | None) -> Chain:
    """The longest prefix of checkpoints 0, 1, ... that verifies: each exactly as kit writes it, signed
    (by a key the ``policy`` files allow for kit-bundle; None: by any key, integrity only), numbered in order,
    linked to the one before, of one run id, naming valid paths."""
    keys = load_trust(policy) if policy is not None else None
    names = checkpoint_files(root)
    chain = Chain()
    for seq in range(min(len(names), MAX_CHECKPOINTS)):
        rel = checkpoint_rel(seq)
        if rel.rsplit("/", 1)[1] not in names:
            break
        try:
            link = _read_link(root, rel, seq, keys, chain)
        except BundleError as e:
            chain.stopped = e.message
            break
        _fold(chain, link)
    kept = {checkpoint_rel(link.seq).rsplit("/", 1)[1] for link in chain.links}
    chain.beyond = [f"{CHECKPOINTS}/{n}" for n in names if n not in kept]
    if chain.beyond and chain.stopped is None:
        chain.stopped = f"{chain.beyond[0]} does not follow checkpoint {len(chain.links) - 1} in the chain"
    return chain


def _read_link(root: Path, rel: str, seq: int, keys: Sequence[Any] | None, chain: Chain) -> Link:
    def bad(why: str) -> BundleError:
        return BundleError(f"{rel}: {why}")

    try:
        data = read_bounded(root / rel, MAX_CHECKPOINT_BYTES)
        env, body = parse_envelope(data, rel)
    except (OSError, ValueError) as e:
        raise bad(f"unreadable ({e})") from None
    except SignatureError as e:
        raise bad(e.message) from None
    if data != envelope_bytes(env):
        raise bad("not in the layout kit writes")
    try:
        stmt = CheckpointStatement.model_validate_json(body)
    except ValidationError as e:
        raise bad(f"not a kit checkpoint statement ({e.errors()[0]['msg']})") from None
    p = stmt.predicate
    previous = p.previous.sha256 if p.previous is not None else None
    if p.sequence != seq or previous != chain.last_digest:
        raise bad(f"sequence {p.sequence} after {chain.last_digest}: it does not continue the chain at {seq}")
    if chain.run_id is not None and p.run_id != chain.run_id:
        raise bad(f"run id {p.run_id!r}, the chain's is {chain.run_id!r}")
    for name in [s.name for s in stmt.subject] + p.removed:
        if (why := rel_problem(name)) or not vouched_files(name):
            raise bad(f"names {name!r} ({why or 'a file no checkpoint may name'})")
    try:
        verified = check_envelope(env, body, keys or [], NS_BUNDLE)
    except SignatureError as e:
        raise bad(e.message) from None
    if verified.invalid:
        raise bad(f"signature(s) by {', '.join(verified.invalid)} did not verify")
    signers = [fp for _, fp, _ in verified.trusted]
    if keys is None:
        signers += [fp for fp, _ in verified.untrusted]
    if not signers:
        who = ", ".join(fp for fp, _ in verified.untrusted)
        raise bad(f"signed by {who}, which your policy does not allow for {NS_BUNDLE}")
    return Link(seq, sha256_hex(data), stmt, signers)


def _fold(chain: Chain, link: Link) -> None:
    p = link.statement.predicate
    for name in p.removed:
        chain.files.pop(name, None)
    for s in link.statement.subject:
        chain.files[s.name] = (s.digest.sha256, int(s.annotations.get("size", -1)))
    if p.run_json is not None:
        try:
            raw = base64.b64decode(p.run_json, validate=True)
        except ValueError:  # binascii.Error
            raise BundleError(f"{checkpoint_rel(link.seq)}: its copy of run.json is not base64") from None
        if "run.json" not in chain.files or sha256_hex(raw) != chain.files["run.json"][0]:
            raise BundleError(f"{checkpoint_rel(link.seq)}: its copy of run.json is not the run.json it names")
        chain.run_json = raw
    chain.links.append(link)


class Checkpointer:
    """Signs the checkpoints of one bundle in this process, continuing ``chain``."""

    def __init__(self, bundle: Bundle, key: SigningKey, chain: Chain) -> None:
        self.bundle, self.key = bundle, key
        self.vouched: Digests = dict(chain.files)
        self.last, self.seq = chain.last_digest, len(chain.links)
        self._seen: dict[str, tuple[tuple[int, int, int, int], tuple[str, int]]] = {}

    def current(self) -> Digests:
        """Every file a checkpoint names, hashed (a file whose inode, size and times are unchanged since this
        process hashed it is not read again); symlinks and special files refused (BundleError)."""
        out: Digests = {}
        _, files = walk(self.bundle.root)
        for rel in sorted(f for f in files if vouched_files(f)):
            st = os.lstat(self.bundle.root / rel)
            sig = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            seen = self._seen.get(rel)
            if seen is None or seen[0] != sig:
                seen = (sig, sha256_file(self.bundle.root / rel))
                self._seen[rel] = seen
            out[rel] = seen[1]
        return out

    def sign(self, kind: str, *, cell: str | None = None, status: str | None = None) -> Path:
        """Checkpoint ``kind``: the files new or changed since the last one, those gone, the link."""
        now = self.current()
        changed = {rel: v for rel, v in now.items() if self.vouched.get(rel) != v}
        removed = sorted(rel for rel in self.vouched if rel not in now)
        run_json = None
        if "run.json" in changed:
            raw = (self.bundle.root / "run.json").read_bytes()
            if sha256_hex(raw) != changed["run.json"][0]:  # rewritten since it was hashed: hash what is embedded
                changed["run.json"] = (sha256_hex(raw), len(raw))
                now["run.json"] = changed["run.json"]
            run_json = base64.b64encode(raw).decode()
        predicate = CheckpointPredicate.model_validate({
            "sequence": self.seq, "previous": {"sha256": self.last} if self.last else None,
            "run_id": self.bundle.run_id, "kind": kind, "cell": cell, "status": status, "at": utc_now(),
            "removed": removed, "run_json": run_json,
            "signer": {"keyid": self.key.fingerprint, "publicKey": self.key.public_line()}})
        body = add_sizes(statement({r: d for r, (d, _) in changed.items()}, CHECKPOINT_PREDICATE,
                                   predicate.model_dump(mode="json", by_alias=True)),
                         {r: s for r, (_, s) in changed.items()})
        data = envelope_bytes(sign_payload(body, self.key))
        path = self.bundle.write_bytes(checkpoint_rel(self.seq), data)
        self.vouched, self.last, self.seq = now, sha256_hex(data), self.seq + 1
        return path


def check_chain(root: Path, policy: Sequence[Path] | None,
                subjects: dict[str, str]) -> tuple[str, JsonObject, list[str]]:
    """`kit verify`: every checkpoint verifies (its signer allowed by the ``policy`` files; None: integrity only) and
    continues the chain, and the chain's fold names exactly the files the final provenance signed (``subjects``,
    already checked against the disk), with the same digests. A bundle without checkpoints (an earlier kit) passes
    with a note. Returns the note, what --json shows, and the problems found."""
    chain = read_chain(root, policy)
    if not chain.links and chain.stopped is None:
        return "no checkpoints (a bundle of a kit before checkpoints)", {"checkpoints": 0}, []
    problems = [f"checkpoint chain: {chain.stopped}"] if chain.stopped else []
    signed = {rel: d for rel, d in subjects.items() if vouched_files(rel)}
    problems += [f"checkpoint chain: {rel} is not in any checkpoint" for rel in sorted(set(signed) - set(chain.files))]
    problems += [f"checkpoint chain: {rel} is checkpointed but not in the bundle"
                 for rel in sorted(set(chain.files) - set(signed))]
    problems += [f"checkpoint chain: {rel}: sha256 differs from its checkpoint" for rel in sorted(signed)
                 if rel in chain.files and chain.files[rel][0] != signed[rel]]
    cells = [lk.statement.predicate.cell for lk in chain.links if lk.statement.predicate.kind == "cell"]
    note = f"{len(chain.links)} checkpoints signed and chained, {len(cells)} of them after a cell, holding every file"
    return note, {"checkpoints": len(chain.links), "cells": [c for c in cells if c is not None]}, problems
