"""Issue 9, archives: provenance first, verified before anything else is written; every other member streamed
and refused at once when unlisted, larger than signed, or altered; hostile headers give exit 9, not a
RecursionError. The bomb (a 10 MB archive with one 10 GiB member) is refused in under 5 s, writing < 100 MB."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from support.bundles import build_bundle

import kit.bundle.extract as extract_mod
from kit.bundle import Bundle, archive, envelope_bytes, verify_bundle
from kit.bundle.subjects import add_sizes
from kit.cli import main
from kit.errors import BundleError, ExitCode
from kit.signing import SigningKey, generate_key, sign_payload

ROOT = Path(__file__).resolve().parents[2]
RECORDS = "cells/oea-r1/level-4/records.jsonl"
GIB = 1 << 30


@pytest.fixture
def runner(tmp_path: Path, kit_home: Path) -> SigningKey:
    return generate_key(tmp_path / "keys" / "runner_ed25519", "kit-runner@testhost")


@pytest.fixture
def trust(tmp_path: Path, runner: SigningKey) -> Path:
    p = tmp_path / "trust" / "allowed_signers"
    p.parent.mkdir()
    p.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
    return p


@pytest.fixture
def sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """tempfile's directory, watched: it must be empty again afterwards."""
    tmp = tmp_path / "tmpdir"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    yield tmp
    assert list(tmp.iterdir()) == []


def _sized(bundle: Bundle, key: SigningKey) -> Bundle:
    """Re-sign the provenance with every subject's size (kit.bundle.provenance signs sizes already: a
    no-op re-sign that keeps these tests honest should that ever change)."""
    path = bundle.root / "provenance.dsse.json"
    env = json.loads(path.read_bytes())
    body = base64.b64decode(env["payload"])
    names = [s["name"] for s in json.loads(body)["subject"]]
    body = add_sizes(body, {n: (bundle.root / n).stat().st_size for n in names})
    path.write_bytes(envelope_bytes(sign_payload(body, key)))
    return bundle


def _unsized(bundle: Bundle, key: SigningKey) -> Bundle:
    """Re-sign the provenance without sizes, as kit signed bundles before sizes were added."""
    path = bundle.root / "provenance.dsse.json"
    stmt = json.loads(base64.b64decode(json.loads(path.read_bytes())["payload"]))
    for subject in stmt["subject"]:
        subject.pop("annotations", None)
    body = json.dumps(stmt, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    path.write_bytes(envelope_bytes(sign_payload(body, key)))
    return bundle


@pytest.fixture
def bundle(tmp_path: Path, runner: SigningKey) -> Bundle:
    return _sized(build_bundle(tmp_path / "results", runner), runner)


def _members(archive_path: Path) -> list[tuple[tarfile.TarInfo, bytes | None]]:
    with tarfile.open(archive_path, "r:gz") as tf:
        return [(m, tf.extractfile(m).read() if m.isfile() else None) for m in tf]  # type: ignore[union-attr]


def _tar_bytes(members: list[tuple[tarfile.TarInfo, bytes | None]], *, end: bool = True) -> bytes:
    buf = io.BytesIO()
    tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115 - left open: no end blocks
    for ti, data in members:
        tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    if end:
        tf.close()
    return buf.getvalue()


def _tgz(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    path.write_bytes(c.compress(_tar_bytes(members)) + c.flush())
    return path


def _run_kit(args: list[str], watch: Path, limit: float = 60.0) -> tuple[int, str, float, int]:
    """Run kit in a subprocess; return (exit code, stderr, seconds, peak bytes on disk under ``watch``).
    Killed once ``watch`` holds 200 MB (the old code would have written the whole 10 GiB member)."""
    peak = 0
    done = threading.Event()

    def disk() -> int:
        total = 0
        for d, _, files in os.walk(watch):
            for f in files:
                try:
                    total += os.lstat(os.path.join(d, f)).st_blocks * 512
                except FileNotFoundError:
                    pass
        return total

    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-m", "kit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         cwd=ROOT, env={**os.environ, "TMPDIR": str(watch), "PYTHONPATH": str(ROOT)})

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, disk())
            if peak > 200 << 20 or time.monotonic() - t0 > limit:
                p.kill()
            time.sleep(0.01)

    th = threading.Thread(target=sample)
    th.start()
    _, err = p.communicate()
    elapsed = time.monotonic() - t0
    done.set()
    th.join()
    return p.returncode, err.decode(), elapsed, max(peak, disk())


def _bomb(path: Path, bundle: Bundle, size: int, cut_after: int | None = None) -> Path:
    """The real archive with RECORDS replaced by ``size`` zero bytes, compressed without ever holding or
    writing them: deflate after a full flush restarts with no history, so 1 MiB of zeros compresses to the
    same bytes every time and the stream repeats them. The gzip trailer's CRC is not the real one: a
    verifier must refuse long before it reads that far. ``cut_after``: stop the file after that many MiB of the
    member's data (a verifier that reads into the member then meets a truncated stream, not a size refusal)."""
    real = tmp = path.with_suffix(".real.tar.gz")
    archive(bundle.root, tmp)
    members = _members(real)
    idx = next(i for i, (m, _) in enumerate(members) if m.name.endswith("/" + RECORDS))
    head = members[:idx]
    big = members[idx][0]
    big.size = size
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    zeros = bytes(1 << 20)
    with open(path, "wb") as out:
        out.write(c.compress(_tar_bytes(head, end=False) + big.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")))
        out.write(c.flush(zlib.Z_FULL_FLUSH))
        piece = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
        assert c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH) == piece
        for _ in range(size // len(zeros) - 2 if cut_after is None else cut_after):
            out.write(piece)
        if cut_after is None:
            out.write(c.compress(bytes(size % len(zeros) + tarfile.RECORDSIZE)) + c.flush())
    real.unlink()
    return path


def test_archive_bomb_is_refused_fast_without_writing(bundle: Bundle, trust: Path, tmp_path: Path) -> None:
    bomb = _bomb(tmp_path / "bomb.tar.gz", bundle, 10 * GIB)
    watch = tmp_path / "tmpdir"
    watch.mkdir()
    rc, err, seconds, peak = _run_kit(["verify", "--trust", str(trust), str(bomb)], watch)
    print(f"\narchive bomb: {bomb.stat().st_size / 1e6:.1f} MB archive, one 10 GiB member: exit {rc} after "
          f"{seconds:.2f} s, at most {peak / 1e6:.2f} MB on disk under TMPDIR")
    assert rc == ExitCode.BUNDLE_INVALID, err
    assert f"{RECORDS}: {10 * GIB} bytes, larger than its signed size" in err, err
    assert "Traceback" not in err
    # how fast is measured and printed, not asserted (timings are not asserted in tests); that the refusal comes
    # from the member's header, before a byte of its data, is test_bomb_is_refused_at_the_member_header
    assert peak < 100 << 20
    assert list(watch.iterdir()) == []


def test_bomb_is_refused_at_the_member_header(bundle: Bundle, trust: Path, tmp_path: Path) -> None:
    # the same bomb cut off after 1 MiB of the member's 10 GiB: reading into the member would meet the cut
    bomb = _bomb(tmp_path / "cut.tar.gz", bundle, 10 * GIB, cut_after=1)
    watch = tmp_path / "tmpdir"
    watch.mkdir()
    rc, err, _, _ = _run_kit(["verify", "--trust", str(trust), str(bomb)], watch)
    assert rc == ExitCode.BUNDLE_INVALID, err
    assert f"{RECORDS}: {10 * GIB} bytes, larger than its signed size" in err, err
    assert "Traceback" not in err and list(watch.iterdir()) == []


def test_unsized_statement_bounds_a_member_by_the_total_limit(
        tmp_path: Path, runner: SigningKey, trust: Path, sandbox: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Provenance without signed sizes (bundles signed before sizes were added): the header is checked against
    what is left of MAX_TOTAL_BYTES before a byte of the member is read."""
    plain = _unsized(build_bundle(tmp_path / "plain", runner), runner)
    bomb = _bomb(tmp_path / "bomb.tar.gz", plain, 64 << 20)
    monkeypatch.setattr(extract_mod, "MAX_TOTAL_BYTES", 16 << 20)
    with pytest.raises(BundleError, match="content exceeds 16777216 bytes; refused"):
        verify_bundle(bomb, [trust])


def test_first_file_must_be_the_provenance(bundle: Bundle, trust: Path, tmp_path: Path, sandbox: Path) -> None:
    good = tmp_path / "good.tar.gz"
    archive(bundle.root, good)
    members = _members(good)
    old_order = [members[0], *sorted(members[1:], key=lambda m: m[0].name.encode())]  # kit's old layout
    evil = _tgz(tmp_path / "old.tar.gz", old_order)
    r = CliRunner().invoke(main, ["verify", "--trust", str(trust), str(evil)])
    assert r.exit_code == ExitCode.BUNDLE_INVALID, r.output
    assert "the first file is" in r.output and "not provenance.dsse.json; refused before writing anything" in r.output
    assert "kit archive" in r.output  # the fix
    assert CliRunner().invoke(main, ["verify", "--trust", str(trust), str(good)]).exit_code == 0


def test_unlisted_member_refused_at_once(bundle: Bundle, trust: Path, tmp_path: Path, sandbox: Path) -> None:
    good = tmp_path / "good.tar.gz"
    archive(bundle.root, good)
    members = _members(good)
    top = bundle.root.name
    smuggled = tarfile.TarInfo(f"{top}/cells/a-smuggled.bin")
    smuggled.size = 3
    evil = _tgz(tmp_path / "extra.tar.gz", [*members[:2], (smuggled, b"hi\n"), *members[2:]])
    r = CliRunner().invoke(main, ["verify", "--trust", str(trust), str(evil)])
    assert r.exit_code == ExitCode.BUNDLE_INVALID, r.output
    assert "extra file not in provenance: cells/a-smuggled.bin (refused before writing any of it)" in r.output


def test_altered_member_is_never_kept(bundle: Bundle, trust: Path, tmp_path: Path, sandbox: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    good = tmp_path / "good.tar.gz"
    archive(bundle.root, good)
    members = _members(good)
    for m, data in members:
        if m.name.endswith("/" + RECORDS):
            assert data is not None
            members[members.index((m, data))] = (m, data.replace(b'"status":200', b'"status":500', 1)
                                                 if b'"status":200' in data else b"X" + data[1:])
    evil = _tgz(tmp_path / "altered.tar.gz", members)
    renamed: list[str] = []
    real_rename = Path.rename

    def spy(self: Path, target: Path) -> Path:
        renamed.append(str(target))
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", spy)
    r = CliRunner().invoke(main, ["verify", "--trust", str(trust), str(evil)])
    assert r.exit_code == ExitCode.BUNDLE_INVALID, r.output
    assert f"{RECORDS}: sha256 differs from the signed provenance (nothing of it was kept)" in r.output
    assert not any(t.endswith(RECORDS) for t in renamed)  # never moved under its own name


def _long_name_chain(n: int) -> bytes:
    """``n`` GNU long-name headers in a row, then one small file (tarfile recursed once per header)."""
    out = b""
    for i in range(n):
        name = f"top/{'x' * 120}{i}".encode() + b"\0"
        h = tarfile.TarInfo("././@LongLink")
        h.type = tarfile.GNUTYPE_LONGNAME
        h.size = len(name)
        out += h.tobuf(tarfile.GNU_FORMAT) + name + bytes(-len(name) % tarfile.BLOCKSIZE)
    f = tarfile.TarInfo("top/f")
    f.size = 1
    return out + f.tobuf(tarfile.GNU_FORMAT) + b"x" + bytes(511) + bytes(1024)


def _pax_chain(n: int) -> bytes:
    out = b""
    for _ in range(n):
        rec = b"18 comment=xxxxxx\n"
        h = tarfile.TarInfo("././@PaxHeader")
        h.type = tarfile.XHDTYPE
        h.size = len(rec)
        out += h.tobuf(tarfile.USTAR_FORMAT) + rec + bytes(-len(rec) % tarfile.BLOCKSIZE)
    f = tarfile.TarInfo("top/f")
    f.size = 1
    return out + f.tobuf(tarfile.USTAR_FORMAT) + b"x" + bytes(511) + bytes(1024)


def _deep_path(depth: int) -> bytes:
    name = "top/" + "/".join(["d"] * depth) + "/f"
    f = tarfile.TarInfo(name)
    f.size = 1
    return _tar_bytes([(f, b"x")])


@pytest.mark.parametrize(("case", "tar", "why"), [
    ("3000 GNU long-name headers", lambda: _long_name_chain(3000), "pax/GNU long-name headers before one member"),
    ("3000 pax headers", lambda: _pax_chain(3000), "pax/GNU long-name headers before one member"),
    ("1500-deep path", lambda: _deep_path(1500), "path deeper than 32 components"),
])
def test_hostile_headers_give_exit_9_not_recursion_error(case: str, tar: object, why: str, tmp_path: Path,
                                                         trust: Path, sandbox: Path) -> None:
    assert callable(tar)
    evil = tmp_path / "evil.tar.gz"
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    evil.write_bytes(c.compress(tar()) + c.flush())
    r = CliRunner().invoke(main, ["verify", "--trust", str(trust), str(evil)])
    assert r.exit_code == ExitCode.BUNDLE_INVALID, (case, r.output)
    assert why in r.output and "RecursionError" not in r.output, (case, r.output)


def test_archive_is_still_deterministic_with_provenance_first(bundle: Bundle, tmp_path: Path) -> None:
    a, b = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    assert archive(bundle.root, a) == archive(bundle.root, b)
    assert a.read_bytes() == b.read_bytes()
    files = [m.name for m, _ in _members(a) if m.isfile()]
    assert files[0] == f"{bundle.root.name}/provenance.dsse.json"


def test_fresh_provenance_signs_every_size(tmp_path: Path, runner: SigningKey) -> None:
    b = build_bundle(tmp_path / "r", runner)
    body = base64.b64decode(json.loads((b.root / "provenance.dsse.json").read_bytes())["payload"])
    subjects = json.loads(body)["subject"]
    assert all(s.get("annotations", {}).get("size") == (b.root / s["name"]).stat().st_size for s in subjects)
