"""Outside files that are not what they claim: a FIFO, a device, a directory, a symlink loop, a huge sparse file,
bytes that are not UTF-8, in the places kit reads keys (kit sign/run --key, KEY.pub, the runner key), pinned data
files (load.dataset.file, load.request.ca_bundle) and image build contexts (their files, .dockerignore,
kit.include). Each is refused at once with an error naming the file, never waited on, never read whole.

On the old code a FIFO hung kit (open() waited for a writer), /dev/zero was hashed forever, a 3 GiB data file was
hashed whole before its size was looked at, and a directory, a symlink loop or non-UTF-8 text was an internal error
(exit 1). Every test runs under ``deadline``: a call that blocks again fails the test instead of hanging it."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest
from click.testing import CliRunner

from kit.bundle.provenance import runner_key
from kit.cli import main
from kit.errors import ExitCode, ImageBuildError, UsageError
from kit.images.context import collect_context
from kit.manifest import workload
from kit.manifest.workload import CaBundle, DatasetFile, ca_problem, file_problem
from kit.plumbing.files import sha256_file
from kit.signing import generate_key, load_signing_key
from kit.workload.corpus import MAX_DATA_BYTES

ROOT = Path(__file__).resolve().parents[2]
SECONDS = 10


class Hung(BaseException):
    """Raised by SIGALRM in whatever call kit was blocked in: not an Exception, so kit's handlers never catch it."""


@pytest.fixture(autouse=True)
def deadline() -> Iterator[None]:
    def fire(signum: int, frame: FrameType | None) -> None:
        raise Hung(f"still blocked after {SECONDS} s: a FIFO or device was opened or read as a file")

    old = signal.signal(signal.SIGALRM, fire)
    signal.alarm(SECONDS)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _kit(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def _refused(code: int, out: str, exit_code: int, *wanted: str) -> None:
    assert code == exit_code, out
    assert "internal error" not in out and "Traceback" not in out, out
    for w in wanted:
        assert w in out, out


# --------------------------------------------------------------------------- key files


@pytest.fixture
def manifest(tmp_path: Path) -> Path:
    m = tmp_path / "m.yaml"
    shutil.copyfile(ROOT / "experiments" / "demo.yaml", m)
    return m


def _sparse(p: Path, size: int) -> Path:
    p.write_bytes(b"")
    os.truncate(p, size)
    return p


def _odd(tmp_path: Path, kind: str, name: str) -> Path:
    p = tmp_path / name
    if kind == "fifo":
        os.mkfifo(p)
    elif kind == "directory":
        p.mkdir()
    elif kind == "loop":
        p.symlink_to(p.name)
    elif kind == "sparse":
        _sparse(p, 200 << 20)  # 200 MB of zeros: the old code read it whole
    elif kind == "not-utf8":
        p.write_bytes(b"ssh-ed25519 AAAA \xff\n")
    return p


@pytest.mark.parametrize(("kind", "why"), [("fifo", "not a regular file (prw"),
                                           ("loop", "Too many levels of symbolic links"),
                                           ("sparse", "larger than 65536 bytes")])
def test_a_key_that_is_no_key_file_is_refused_naming_it(tmp_path: Path, manifest: Path, kind: str, why: str) -> None:
    key = _odd(tmp_path, kind, "key")
    _refused(*_kit("sign", str(manifest), "--key", str(key)), ExitCode.USAGE,
             f"{key}: cannot be read as a key file ({why}", "Hint: give the private key itself")
    assert not manifest.with_name("m.yaml.sig").exists()


def test_a_key_that_is_a_directory_is_refused_naming_it(tmp_path: Path) -> None:
    """--key refuses a directory itself (click); the runner key's default path and callers of the API do not."""
    key = _odd(tmp_path, "directory", "key")
    with pytest.raises(UsageError, match=f"{key}: cannot be read as a key file \\(is a directory\\)"):
        load_signing_key(key)


def test_proc_self_mem_as_a_key_names_the_file_not_the_disk(manifest: Path) -> None:
    """Was exit 14, "input/output error ... free space (or fix the disk)", naming no file."""
    _refused(*_kit("sign", str(manifest), "--key", "/proc/self/mem"), ExitCode.USAGE,
             "/proc/self/mem: cannot be read as a key file (Input/output error)")


@pytest.mark.parametrize(("kind", "why"), [("fifo", "cannot be read as a public key file (not a regular file (prw"),
                                           ("directory", "cannot be read as a public key file (is a directory)"),
                                           ("not-utf8", "the public key file is not UTF-8 text (byte 17)")])
def test_a_key_pub_that_is_no_text_file_is_refused_naming_it(tmp_path: Path, manifest: Path, kind: str,
                                                            why: str) -> None:
    key = generate_key(tmp_path / "keys" / "k", "alice@lab")
    pub = Path(f"{key.path}.pub")
    pub.unlink()
    _odd(pub.parent, kind, pub.name)
    _refused(*_kit("sign", str(manifest), "--key", str(key.path)), ExitCode.USAGE, f"{pub}: {why}",
             "Hint: the KEY.pub beside a key gives its comment")


def test_the_comment_is_from_the_first_line_of_key_pub(tmp_path: Path) -> None:
    """A .pub of several lines put a line break (and the next line) into the comment, so into trust lines."""
    key = generate_key(tmp_path / "k", "alice@lab")
    pub = Path(f"{key.path}.pub")
    pub.write_text(pub.read_text() + 'mallory namespaces="kit-manifest" ssh-ed25519 AAAA\n')
    assert load_signing_key(key.path).comment == "alice@lab"


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_runner_key_that_is_no_key_file_is_refused(tmp_path: Path, kit_home: Path, kind: str) -> None:
    (kit_home / "kit").mkdir(parents=True)
    odd = _odd(kit_home / "kit", kind, "runner_ed25519")
    with pytest.raises(UsageError, match="runner_ed25519: cannot be read as a key file"):
        runner_key(None)
    assert odd.exists() and not (kit_home / "kit" / "allowed_signers").exists()  # nothing made in its place


def test_kit_run_with_a_fifo_key_is_refused_before_anything_runs(tmp_path: Path, kit_home: Path) -> None:
    key = _odd(tmp_path, "fifo", "key")
    code, out = _kit("run", str(ROOT / "experiments" / "demo.yaml"), "--allow-unsigned", "--key", str(key),
                     "--out", str(tmp_path / "results"))
    _refused(code, out, ExitCode.USAGE, f"{key}: cannot be read as a key file (not a regular file (prw")


# --------------------------------------------------------------------------- pinned data files


def _pin(path: Path | str) -> DatasetFile:
    return DatasetFile(path=str(path), sha256="0" * 64)


@pytest.mark.parametrize(("kind", "why"), [("fifo", "cannot read it (not a regular file (prw"),
                                           ("directory", "cannot read it (is a directory)"),
                                           ("loop", "cannot read it (Too many levels of symbolic links)")])
def test_a_pinned_file_that_is_no_file_is_refused_at_once(tmp_path: Path, kind: str, why: str) -> None:
    odd = _odd(tmp_path, kind, "data.jsonl")
    assert str(file_problem(_pin(odd))).startswith(f"load.dataset.file {odd}: {why}")
    assert str(ca_problem(CaBundle(path=str(odd), sha256="0" * 64))).startswith(f"load.request.ca_bundle {odd}: {why}")


def test_dev_zero_as_a_pinned_file_is_refused_not_hashed_forever() -> None:
    assert file_problem(_pin("/dev/zero")) == "load.dataset.file /dev/zero: cannot read it (not a regular file (crw-rw-rw-))"


def test_a_huge_pinned_file_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    """docs/workload.md: the size is checked before the file is read (3 GiB was hashed whole, then refused)."""
    big = _sparse(tmp_path / "big.jsonl", 3 << 30)
    t0 = time.monotonic()
    assert file_problem(_pin(big)) == f"load.dataset.file {big}: {3 << 30} bytes, over kit's 1024 MiB bound for this file"
    ca = _sparse(tmp_path / "ca.pem", 5 << 20)
    assert "5242880 bytes, over kit's 4 MiB bound" in str(ca_problem(CaBundle(path=str(ca), sha256="0" * 64)))
    assert time.monotonic() - t0 < 2
    assert workload.MAX_PINNED_BYTES == MAX_DATA_BYTES  # preflight's bound is the largest any dataset kind reads


def test_a_pinned_file_reached_through_a_link_still_hashes(tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi"}\n')
    link = tmp_path / "link.jsonl"
    link.symlink_to(data)
    assert file_problem(DatasetFile(path=str(link), sha256=sha256_file(data)[0])) is None


def test_kit_run_with_a_fifo_dataset_is_refused_in_preflight(tmp_path: Path, kit_home: Path) -> None:
    fifo = _odd(tmp_path, "fifo", "prompts.jsonl")
    m = tmp_path / "wj.yaml"
    m.write_text((ROOT / "experiments" / "workload-jsonl.yaml").read_text()
                 .replace("path: experiments/data/prompts-devil.jsonl", f"path: {fifo}"))
    _refused(*_kit("run", str(m), "--allow-unsigned", "--out", str(tmp_path / "results")), ExitCode.INVALID_MANIFEST,
             f"load.dataset.file {fifo}: cannot read it (not a regular file (prw")


def test_sha256_file_refuses_a_fifo_and_reads_nothing_of_a_file_over_its_limit(tmp_path: Path) -> None:
    fifo = _odd(tmp_path, "fifo", "fifo")
    with pytest.raises(OSError, match="not a regular file"):
        sha256_file(fifo)
    sparse = _sparse(tmp_path / "sparse", 1 << 40)  # 1 TiB: reading even its bound would take minutes
    assert sha256_file(sparse, 1 << 30)[1] == 1 << 40


# --------------------------------------------------------------------------- image build contexts


@pytest.fixture
def context(tmp_path: Path) -> Path:
    app = tmp_path / "images" / "app"
    app.mkdir(parents=True)
    (app / "Dockerfile").write_text("FROM scratch\nCOPY . /app\n")
    (app / "serve.py").write_text("print('serving')\n")
    return app


@pytest.mark.parametrize("where", ["context", "include"])
def test_a_fifo_in_an_image_context_is_refused_naming_it(tmp_path: Path, context: Path, where: str) -> None:
    folder = context / "sub" if where == "context" else tmp_path / "lib"
    folder.mkdir()
    fifo = _odd(folder, "fifo", "pipe")
    if where == "include":
        (context / "kit.include").write_text("lib\n")
    with pytest.raises(ImageBuildError) as e:
        collect_context(tmp_path, context, "Dockerfile")
    assert str(e.value).startswith(f"{fifo}: cannot be sent in the build context (not a regular file (prw")
    assert "list it in the context's .dockerignore" in str(e.value)
    (context / ".dockerignore").write_text("**/pipe\n")  # excluded: never opened, the context collects
    assert [rel for rel, _ in collect_context(tmp_path, context, "Dockerfile").files] == [
        ".dockerignore", "Dockerfile", *(["kit.include"] if where == "include" else []), "serve.py"]


@pytest.mark.parametrize("name", [".dockerignore", "kit.include"])
@pytest.mark.parametrize(("kind", "why"), [("not-utf8", "not UTF-8 text (line 1, byte 17)"),
                                           ("fifo", "(not a regular file (prw"), ("directory", "(is a directory)")])
def test_an_unreadable_dockerignore_or_kit_include_is_refused_naming_it(tmp_path: Path, context: Path, name: str,
                                                                         kind: str, why: str) -> None:
    odd = _odd(context, kind, name)
    with pytest.raises(ImageBuildError) as e:
        collect_context(tmp_path, context, "Dockerfile")
    assert str(e.value).startswith(f"{odd}: ") and why in str(e.value), str(e.value)


def test_kit_sign_with_a_fifo_in_the_context_exits_6_naming_it(tmp_path: Path, context: Path, kit_home: Path) -> None:
    from support.manifests import manifest_data, write_manifest

    base = "busybox:1.36@sha256:" + hashlib.sha256(b"busybox:1.36").hexdigest()  # no placeholder: sign refuses one
    arms = [{"name": "a", "image": {"context": "images/app", "base": base}},
            {"name": "b", "image": {"context": "images/app", "base_arm": "a"}}]
    m = write_manifest(tmp_path / "experiments" / "m.yaml", manifest_data(runtime="docker", command=["serve"], arms=arms))
    fifo = _odd(context, "fifo", "pipe")
    key = generate_key(tmp_path / "keys" / "k", "alice@lab")
    _refused(*_kit("sign", str(m), "--key", str(key.path)), ExitCode.IMAGE_BUILD_FAILED,
             f"{fifo}: cannot be sent in the build context")
