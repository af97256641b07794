from __future__ import annotations

import base64
import hashlib
import json
import socket
from pathlib import Path
from typing import Any

import pytest

from kit.bundle import BUILD_TYPE, SLSA_PROVENANCE_V1, Bundle, default_runner_key_path, runner_key, sign_provenance
from kit.signing import STATEMENT_TYPE, SigningKey, load_signing_key, parse_envelope


def _statement(b: Bundle) -> tuple[dict[str, Any], dict[str, Any]]:
    env, body = parse_envelope(b.path("provenance.dsse.json").read_bytes(), "provenance")
    return env, json.loads(body)


def test_statement_lists_every_file_with_sha256(bundle: Bundle, runner: SigningKey) -> None:
    env, stmt = _statement(bundle)
    assert stmt["_type"] == STATEMENT_TYPE
    assert stmt["predicateType"] == SLSA_PROVENANCE_V1
    names = [s["name"] for s in stmt["subject"]]
    assert names == bundle.files() and "provenance.dsse.json" not in names
    assert "failed/oea-r1-a1/level-1/records.jsonl" in names
    for s in stmt["subject"]:
        assert s["digest"]["sha256"] == hashlib.sha256((bundle.root / s["name"]).read_bytes()).hexdigest()
    assert [s["keyid"] for s in env["signatures"]] == [runner.fingerprint]


def test_slsa_predicate_shape(bundle: Bundle, runner: SigningKey) -> None:
    _, stmt = _statement(bundle)
    bd, rd = stmt["predicate"]["buildDefinition"], stmt["predicate"]["runDetails"]
    assert bd["buildType"] == BUILD_TYPE
    manifest_sha = hashlib.sha256(bundle.path("manifest.yaml").read_bytes()).hexdigest()
    assert bd["externalParameters"] == {"manifest": {"path": "manifest.yaml", "digest": {"sha256": manifest_sha}},
                                        "flags": {"allow_unsigned": False}}
    assert bd["internalParameters"]["runtime"] == "process"
    assert bd["resolvedDependencies"] == []
    assert rd["builder"]["id"] == f"urn:kit:runner:{socket.gethostname()}"
    assert set(rd["builder"]["version"]) == {"kit", "python"}
    assert rd["builder"]["kit_signer"] == {"keyid": runner.fingerprint, "publicKey": runner.public_line()}
    assert rd["metadata"] == {"invocationId": bundle.run_id, "startedOn": "2025-01-01T00:00:00Z",
                              "finishedOn": "2025-01-01T00:10:00Z"}
    assert [p["name"] for p in rd["byproducts"]] == [f for f in bundle.files() if f.endswith(".log")]


def test_envelope_is_kit_layout_and_payload_is_standard_base64(bundle: Bundle) -> None:
    raw = bundle.path("provenance.dsse.json").read_bytes()
    env = json.loads(raw)
    assert raw == (json.dumps(env, indent=2, sort_keys=True) + "\n").encode()
    assert base64.b64encode(base64.b64decode(env["payload"])).decode() == env["payload"]


def test_resign_after_change_and_unknown_pieces(bundle: Bundle, runner: SigningKey) -> None:
    bundle.remove_provenance()
    bundle.write_bytes("report.md", b"# re-rendered\n")
    sign_provenance(bundle, runner, predicate={})
    _, stmt = _statement(bundle)
    assert stmt["predicate"]["buildDefinition"]["internalParameters"] == {}
    with pytest.raises(ValueError, match="unknown provenance pieces"):
        sign_provenance(bundle, runner, predicate={"externalParameter": {}})


def test_runner_key_generated_once_in_xdg_config(kit_home: Path) -> None:
    key, notice = runner_key(None)
    path = default_runner_key_path()
    assert path == kit_home / "kit" / "runner_ed25519"
    assert path.exists() and (path.stat().st_mode & 0o777) == 0o600
    assert key.comment == f"kit-runner@{socket.gethostname()}"
    assert notice is not None and "\n" not in notice
    assert key.fingerprint in notice and 'namespaces="kit-bundle"' in notice and key.public_line() in notice
    again, notice2 = runner_key(None)
    assert notice2 is None and again.fingerprint == key.fingerprint


def test_runner_key_explicit_path(runner: SigningKey) -> None:
    key, notice = runner_key(runner.path)
    assert notice is None and key.fingerprint == runner.fingerprint
    assert load_signing_key(runner.path).comment == "kit-runner@testhost"
