"""The source of a reproduction is verified under the user's policy into a private copy: directory and archive,
untrusted (refused, or accepted with the flag and recorded), tampered (exit 9), links refused."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from reproduce_helpers import rewrite_member

from kit.bundle import PROVENANCE, Bundle, BundleUntrusted, archive, sign_provenance
from kit.errors import BundleError, ExitCode, SignatureError, UsageError
from kit.reproduce import ReproduceOptions, reproduce
from kit.reproduce.run import _inputs, _run_options
from kit.reproduce.source import opened
from kit.signing import SigningKey, generate_key, sign_manifest

SignedBundle = Callable[..., Bundle]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_trusted_directory_is_verified_into_a_private_copy(signed_bundle: SignedBundle, trust_file: Path) -> None:
    b = signed_bundle()
    with opened(b.root, [trust_file], allow_untrusted=False) as src:
        copy = src.root
        assert copy != b.root and not copy.is_relative_to(b.root)
        assert (copy / "summary.json").read_bytes() == b.path("summary.json").read_bytes()
        assert src.ref.kind == "directory" and src.ref.trusted and not src.ref.allow_untrusted_source
        assert src.ref.provenance_sha256 == _sha(b.path(PROVENANCE))
        assert src.ref.manifest_sha256 == _sha(b.path("manifest.yaml")) and src.ref.archive_sha256 is None
        assert src.ref.run_id == b.run_id and src.ref.signer.startswith("TRUSTED: signed by")
        assert src.summary.arms == ["base", "oea"] and src.lines[0] == src.ref.signer
    assert not copy.exists()  # the copy is gone afterwards


def test_an_archive_is_verified_as_kit_verify_does(signed_bundle: SignedBundle, trust_file: Path,
                                                   tmp_path: Path) -> None:
    b = signed_bundle()
    tar = tmp_path / "shared.tar.gz"
    digest = archive(b.root, tar)
    with opened(tar, [trust_file], allow_untrusted=False) as src:
        assert src.ref.kind == "archive" and src.ref.archive_sha256 == digest and src.ref.top == b.root.name
        assert src.ref.provenance_sha256 == _sha(b.path(PROVENANCE)) and src.ref.trusted


@pytest.mark.parametrize("as_archive", [False, True])
def test_an_untrusted_source_is_refused_unless_allowed(signed_bundle: SignedBundle, tmp_path: Path,
                                                       as_archive: bool) -> None:
    b = signed_bundle()
    target = b.root
    if as_archive:
        target = tmp_path / "b.tar.gz"
        archive(b.root, target)
    other: SigningKey = generate_key(tmp_path / "other", "someone@else")
    policy = tmp_path / "policy"
    policy.write_text(f'someone namespaces="kit-bundle" {other.public_line()}\n')
    with pytest.raises(BundleUntrusted) as e, opened(target, [policy], allow_untrusted=False):
        pass
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID == 9
    assert "--allow-untrusted-source" in str(e.value) and "UNTRUSTED" in str(e.value)
    with opened(target, [policy], allow_untrusted=True) as src:
        assert not src.ref.trusted and src.ref.allow_untrusted_source
        assert src.ref.signer.startswith("UNTRUSTED") and "--allow-untrusted-source" in src.ref.signer


@pytest.mark.parametrize("as_archive", [False, True])
def test_a_tampered_source_is_refused(signed_bundle: SignedBundle, trust_file: Path, tmp_path: Path,
                                      as_archive: bool) -> None:
    b = signed_bundle()
    target = b.root
    if as_archive:  # kit archive writes only what was sealed: the archive is altered after it was written
        target = tmp_path / "b.tar.gz"
        archive(b.root, target)
        rewrite_member(target, f"{b.root.name}/cells/oea-r2/level-4/records.jsonl",
                       lambda d: d[:200] + bytes([d[200] ^ 1]) + d[201:])
    else:
        rec = b.path("cells/oea-r2/level-4/records.jsonl")
        data = bytearray(rec.read_bytes())
        data[200] ^= 1
        rec.write_bytes(bytes(data))
    with pytest.raises(BundleError) as e, opened(target, [trust_file], allow_untrusted=True):
        pass
    assert e.value.exit_code == 9 and "records.jsonl" in str(e.value) and "sha256 differs" in str(e.value)


def test_a_link_in_a_directory_source_is_refused(signed_bundle: SignedBundle, trust_file: Path) -> None:
    b = signed_bundle()
    os.symlink("/etc/hostname", b.path("extra"))
    with pytest.raises(BundleError, match="symbolic link"), opened(b.root, [trust_file], allow_untrusted=False):
        pass


def test_not_a_bundle(tmp_path: Path, trust_file: Path) -> None:
    f = tmp_path / "x.txt"
    f.write_text("no")
    with pytest.raises(Exception, match="neither a bundle directory") as e, opened(f, [trust_file],
                                                                                  allow_untrusted=False):
        pass
    assert getattr(e.value, "exit_code", None) == ExitCode.USAGE


def test_a_source_whose_plan_this_kit_would_not_make_is_refused(signed_bundle: SignedBundle,
                                                                trust_file: Path) -> None:
    """The synthetic bundle's plan.json has 4 repeats per arm; its manifest says 1: not the same experiment."""
    b = signed_bundle()
    with pytest.raises(UsageError) as e:
        reproduce(ReproduceOptions(source=b.root, trust=[trust_file], allow_unsigned=True, dry_run=True))
    assert e.value.exit_code == 2 and "differs from the source's plan.json" in str(e.value)
    with pytest.raises(SignatureError) as e2:  # and without --allow-unsigned, the manifest's signature first
        reproduce(ReproduceOptions(source=b.root, trust=[trust_file], dry_run=True))
    assert e2.value.exit_code == 4 and "--allow-unsigned" in str(e2.value)


def test_a_source_run_id_that_is_a_path_is_refused(signed_bundle: SignedBundle, runner: SigningKey,
                                                  tmp_path: Path) -> None:
    """The source's run.json is its runner's word: a run id that climbs out of the project (which named the manifest
    the re-run resolves images/ from) is refused as the bundle's own file, even from an untrusted source."""
    b = signed_bundle()
    run = json.loads(b.path("run.json").read_bytes())
    run["run_id"] = "/../../../tmp/evil/x"
    b.write_json("run.json", run)
    sign_provenance(b, runner, predicate={"internalParameters": {"runtime": "process"}})
    with pytest.raises(BundleError) as e, opened(b.root, [], allow_untrusted=True):
        pass
    assert e.value.exit_code == 9 and "run_id" in str(e.value)


def test_the_manifest_is_labelled_in_the_project_whatever_the_run_id(signed_bundle: SignedBundle,
                                                                     trust_file: Path, tmp_path: Path) -> None:
    """The re-run's manifest is named by a constant in the project (its project root holds images/)."""
    b = signed_bundle()
    project = tmp_path / "project"
    project.mkdir()
    opts = ReproduceOptions(source=b.root, trust=[trust_file], allow_unsigned=True, project=project)
    with opened(b.root, [trust_file], allow_untrusted=False) as src:
        inputs = _inputs(src, opts, _run_options(opts, src))
    assert inputs.lm.path == project / "reproduce-source.yaml" and inputs.lm.project_root == project


@pytest.mark.parametrize("name", ["run.tar", "RUN.TAR.GZ", "bundle-no-suffix"])
def test_an_archive_is_known_by_its_bytes_whatever_its_name(signed_bundle: SignedBundle, trust_file: Path,
                                                           tmp_path: Path, name: str) -> None:
    """Review defect 2: `kit reproduce --dry-run run.tar` (a gzip `kit archive` wrote) said "neither a bundle directory
    nor a .tar.gz/.tgz archive" (exit 2): an archive is known by gzip's magic bytes, not only by its name."""
    b = signed_bundle()
    digest = archive(b.root, tmp_path / "b.tar.gz")
    target = tmp_path / name
    shutil.copyfile(tmp_path / "b.tar.gz", target)
    with opened(target, [trust_file], allow_untrusted=False) as src:
        assert src.ref.kind == "archive" and src.ref.archive_sha256 == digest and src.ref.top == b.root.name


def test_a_source_manifest_is_named_as_the_bundle_holds_it(signed_bundle: SignedBundle, trust_file: Path,
                                                          runner: SigningKey, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Review defect 4: without --allow-unsigned the refusal named ./reproduce-source.yaml, a file that does not
    exist; it names the source bundle's manifest.yaml (and a bundle without manifest.yaml.sig says so)."""
    b = signed_bundle()
    b.path("manifest.yaml.sig").unlink()  # signed for real, by a key the policy does not approve for kit-manifest
    sign_manifest(b.path("manifest.yaml"), b.path("manifest.yaml").read_bytes(), runner)
    sign_provenance(b, runner, predicate={"internalParameters": {"runtime": "process"}})
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SignatureError) as e:
        reproduce(ReproduceOptions(source=b.root, trust=[trust_file], dry_run=True))
    assert e.value.exit_code == 4
    assert e.value.message.startswith(f"{b.root / 'manifest.yaml'}: no signature by a trusted key"), e.value.message
    assert "reproduce-source.yaml" not in str(e.value), str(e.value)
    b.path("manifest.yaml.sig").unlink()
    sign_provenance(b, runner, predicate={"internalParameters": {"runtime": "process"}})
    with pytest.raises(SignatureError) as e:
        reproduce(ReproduceOptions(source=b.root, trust=[trust_file], dry_run=True))
    assert e.value.message == f"{b.root / 'manifest.yaml'}: not signed (the source bundle has no manifest.yaml.sig)"
    assert "--allow-unsigned" in str(e.value) and "reproduce-source.yaml" not in str(e.value)
