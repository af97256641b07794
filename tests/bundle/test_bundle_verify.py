from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kit.bundle import Bundle, envelope_bytes, sign_provenance, verify_bundle
from kit.errors import BundleError, ExitCode
from kit.files.summary import SUMMARY_SCHEMA_VERSION
from kit.signing import SigningKey, sign_payload, user_trust_file
from kit.stats import summarize_bundle
from kit.stats.versions import as_schema

PROV = "provenance.dsse.json"


def _fails(target: Path, trust: list[Path], *names: str) -> BundleError:
    with pytest.raises(BundleError) as e:
        verify_bundle(target, trust)
    assert e.value.exit_code == ExitCode.BUNDLE_INVALID
    for n in names:
        assert n in e.value.message, e.value.message
    return e.value


def _flip(path: Path, pos: int, mask: int = 0x01) -> bytes:
    data = path.read_bytes()
    changed = bytearray(data)
    changed[pos] ^= mask
    path.write_bytes(bytes(changed))
    return data


def test_verify_passes_and_says_who(bundle: Bundle, trust_file: Path, runner: SigningKey) -> None:
    res = verify_bundle(bundle.root, [trust_file])
    n = len(bundle.files())
    first = res.summary.splitlines()[0]  # who signed, the comment as a claim, trusted by which line
    assert first == (f"TRUSTED: signed by {runner.fingerprint} (key comment 'kit-runner@testhost': self-declared, "
                     f"not proof of identity), trusted for kit-bundle as 'runner' by {trust_file}:1")
    assert f"files: {n} checked against the signed provenance" in res.summary
    assert "manifest approval (kit-manifest): NOT trusted under your policy" in res.summary
    assert "recorded flags: allow_unpinned=false, allow_unsigned=false" in res.summary
    assert "summary.json recomputed from the records OK" in res.summary
    assert res.details["files"] == n and res.details["trusted"] is True and res.details["trust"] == "TRUSTED"
    assert res.details["signers"] == [{"principal": "runner", "fingerprint": runner.fingerprint,
                                       "comment": "kit-runner@testhost", "trusted_by": f"{trust_file}:1"}]
    assert res.details["run"]["status"] == "complete"


def test_every_single_byte_change_in_every_file_fails_naming_it(bundle: Bundle, trust_file: Path) -> None:
    files = bundle.files()
    assert len(files) > 30
    for rel in files:
        path = bundle.root / rel
        size = path.stat().st_size
        for pos in sorted({0, size // 3, size // 2, size - 2, size - 1}):
            for mask in (0x01, 0x80):
                original = _flip(path, pos, mask)
                try:
                    _fails(bundle.root, [trust_file], f"{rel}: sha256 differs from the signed provenance")
                finally:
                    path.write_bytes(original)
    assert verify_bundle(bundle.root, [trust_file]).details["trusted"] is True


def test_every_byte_change_in_the_provenance_fails(bundle: Bundle, trust_file: Path) -> None:
    """Every byte outside the base64 payload, and a sample inside it: unsigned parts must not be malleable."""
    path = bundle.root / PROV
    data = path.read_bytes()
    payload = json.loads(data)["payload"]
    start = data.index(payload.encode())
    inside = set(range(start, start + len(payload), 37)) | {start, start + len(payload) - 1}
    positions = [p for p in range(len(data)) if not start <= p < start + len(payload)] + sorted(inside)
    for pos in positions:
        original = _flip(path, pos)
        try:
            _fails(bundle.root, [trust_file], PROV)
            _fails(bundle.root, [], PROV)  # also without trust files: tampering is never "just untrusted"
        finally:
            path.write_bytes(original)
    verify_bundle(bundle.root, [trust_file])


def test_added_and_removed_files_fail_naming_them(bundle: Bundle, trust_file: Path) -> None:
    (bundle.root / "cells" / "oea-r1" / "extra.txt").write_text("sneaked in\n")
    _fails(bundle.root, [trust_file], "extra file not in provenance: cells/oea-r1/extra.txt")
    (bundle.root / "cells" / "oea-r1" / "extra.txt").unlink()
    records = bundle.root / "cells" / "base-r1" / "level-4" / "records.jsonl"
    kept = records.read_bytes()
    records.unlink()
    _fails(bundle.root, [trust_file], "missing file: cells/base-r1/level-4/records.jsonl")
    records.write_bytes(kept)
    (bundle.root / "plots" / "ttft.png").rename(bundle.root / "plots" / "ttft2.png")
    err = _fails(bundle.root, [trust_file], "missing file: plots/ttft.png", "extra file not in provenance: plots/ttft2.png")
    assert "2 problems" in err.message


def test_missing_provenance_and_symlinks_fail(bundle: Bundle, trust_file: Path) -> None:
    (bundle.root / "link").symlink_to("/etc/passwd")
    _fails(bundle.root, [trust_file], "link: is a symbolic link")
    (bundle.root / "link").unlink()
    bundle.remove_provenance()
    _fails(bundle.root, [trust_file], f"missing file: {PROV}")


def test_swapped_signature_fails(make_bundle: Callable[..., Bundle], trust_file: Path) -> None:
    a, b = make_bundle(), make_bundle()
    env_a = json.loads((a.root / PROV).read_bytes())
    env_b = json.loads((b.root / PROV).read_bytes())
    env_a["signatures"][0]["sig"] = env_b["signatures"][0]["sig"]  # same key, other statement
    (a.root / PROV).write_bytes(envelope_bytes(env_a))
    _fails(a.root, [trust_file], PROV, "invalid signature")
    _fails(a.root, [], PROV, "invalid signature")


def test_swapped_whole_provenance_fails_naming_files(make_bundle: Callable[..., Bundle], runner: SigningKey,
                                                      trust_file: Path) -> None:
    a, b = make_bundle(), make_bundle()
    (a.root / "report.md").write_text("different\n")
    a.remove_provenance()
    sign_provenance(a, runner, predicate={})
    (b.root / PROV).write_bytes((a.root / PROV).read_bytes())  # validly signed, but for other contents
    _fails(b.root, [trust_file], "report.md: sha256 differs from the signed provenance")


def test_untrusted_signer_fails_with_or_without_trust(make_bundle: Callable[..., Bundle], stranger: SigningKey,
                                                       trust_file: Path, tmp_path: Path) -> None:
    """Was: an untrusted signer passed with a notice unless --trust was given (issue 9: a forged bundle verified)."""
    b = make_bundle()
    b.remove_provenance()
    sign_provenance(b, stranger, predicate={})
    err = _fails(b.root, [], f"UNTRUSTED: bundle {b.root} is signed by {stranger.fingerprint} (key comment "
                 "'mallory@elsewhere': self-declared, not proof of identity), which your policy does not allow "
                 "for kit-bundle (no trust file")
    assert err.hint and 'namespaces="kit-bundle"' in err.hint
    res = verify_bundle(b.root, [], integrity_only=True)
    assert res.summary.startswith("UNTRUSTED (--integrity-only: no trust decision made): signed by "
                                  f"{stranger.fingerprint}")
    assert res.details["trusted"] is False and res.details["trust"] == "UNTRUSTED"
    err = _fails(b.root, [trust_file], stranger.fingerprint, "which your policy does not allow", str(trust_file))
    assert err.hint and 'namespaces="kit-bundle"' in err.hint
    # a key trusted only for manifests does not vouch for bundles
    manifest_only = tmp_path / "manifest_only"
    manifest_only.write_text(f'mallory namespaces="kit-manifest" {stranger.public_line()}\n')
    _fails(b.root, [manifest_only], "which your policy does not allow for kit-bundle")


def test_default_trust_file_is_used_without_trust(bundle: Bundle, runner: SigningKey) -> None:
    _fails(bundle.root, [], "UNTRUSTED")
    user = user_trust_file()
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(f'me namespaces="kit-bundle" {runner.public_line()}\n')
    res = verify_bundle(bundle.root, [])
    assert res.details["trusted"] is True and "trusted for kit-bundle as 'me' by" in res.summary


def test_invalid_cosignature_fails_even_with_a_trusted_one(bundle: Bundle, stranger: SigningKey,
                                                           trust_file: Path) -> None:
    path = bundle.root / PROV
    env = json.loads(path.read_bytes())
    body = base64.b64decode(env["payload"])
    env = sign_payload(body, stranger, env)
    path.write_bytes(envelope_bytes(env))
    res = verify_bundle(bundle.root, [trust_file])  # a valid co-signature is fine
    assert "also signed by" in res.summary and stranger.fingerprint in res.summary
    sig = bytearray(base64.b64decode(env["signatures"][1]["sig"]))
    sig[5] ^= 1
    env["signatures"][1]["sig"] = base64.b64encode(bytes(sig)).decode()
    path.write_bytes(envelope_bytes(env))
    _fails(bundle.root, [trust_file], f"invalid signature by {stranger.fingerprint}")


def test_forged_comment_on_runner_signature_fails(bundle: Bundle, trust_file: Path) -> None:
    path = bundle.root / PROV
    env = json.loads(path.read_bytes())
    env["signatures"][0]["publicKey"] = env["signatures"][0]["publicKey"].rsplit(" ", 1)[0] + " alice@trusted-lab"
    path.write_bytes(envelope_bytes(env))
    _fails(bundle.root, [], "differs from the signed one")


def test_summary_is_recomputed(bundle: Bundle, runner: SigningKey, trust_file: Path) -> None:
    summary = json.loads(bundle.path("summary.json").read_text())
    assert summary["cells"][1]["id"] == "oea-r1"
    summary["cells"][1]["levels"]["4"]["ttft_ms"]["mean"] += 1.0
    bundle.remove_provenance()
    bundle.write_json("summary.json", summary)
    sign_provenance(bundle, runner, predicate={})  # validly signed, but the numbers are not the records'
    err = _fails(bundle.root, [trust_file], "summary.json: differs from the summary recomputed from the records at "
                 "cells[1].levels.4.ttft_ms.mean")
    assert "recomputed:" in err.message


def test_summary_type_and_key_differences_are_named(bundle: Bundle, runner: SigningKey, trust_file: Path) -> None:
    summary = summarize_bundle(bundle.root)
    summary["schema_version"] = float(SUMMARY_SCHEMA_VERSION)  # 3 == 3.0 in Python, but not the same JSON
    summary["extra"] = []
    bundle.remove_provenance()
    bundle.write_json("summary.json", summary)
    sign_provenance(bundle, runner, predicate={})
    _fails(bundle.root, [trust_file], "at extra (only in summary.json)")
    del summary["extra"]
    bundle.remove_provenance()
    bundle.write_json("summary.json", summary)
    sign_provenance(bundle, runner, predicate={})
    _fails(bundle.root, [trust_file],
           f"at schema_version (summary.json: {SUMMARY_SCHEMA_VERSION}.0, recomputed: {SUMMARY_SCHEMA_VERSION})")


def _resign_summary(bundle: Bundle, runner: SigningKey, summary: dict[str, object]) -> None:
    bundle.remove_provenance()
    bundle.write_json("summary.json", summary)
    sign_provenance(bundle, runner, predicate={})


def test_a_summary_an_earlier_kit_wrote_is_recomputed_as_that_schema(bundle: Bundle, runner: SigningKey,
                                                                     trust_file: Path) -> None:
    # summary schema 2 is schema 3 less the short-response fields: recomputed to the byte, never taken on trust
    # (with the analysis before schema 5, Welch's t on cell means: kit verify recomputes an earlier schema so)
    earlier = as_schema(summarize_bundle(bundle.root, legacy=True), 2)
    assert earlier is not None and earlier["schema_version"] == 2 and "length_test" not in earlier["analysis"]
    _resign_summary(bundle, runner, earlier)
    res = verify_bundle(bundle.root, [trust_file])
    assert "summary.json recomputed from the records OK (summary schema 2, as the kit that wrote it" in res.summary
    earlier["comparisons"][0]["verdict"] = "whatever that kit said"  # a claim the records do not support
    _resign_summary(bundle, runner, earlier)
    _fails(bundle.root, [trust_file], "differs from the summary recomputed from the records at comparisons[0].verdict")


@pytest.mark.parametrize("version", [SUMMARY_SCHEMA_VERSION + 1, 1, 0, -5])
def test_a_summary_schema_this_kit_cannot_make_is_refused(bundle: Bundle, runner: SigningKey, trust_file: Path,
                                                          version: int) -> None:
    summary = summarize_bundle(bundle.root)
    summary["schema_version"] = version
    _resign_summary(bundle, runner, summary)
    _fails(bundle.root, [trust_file], f"summary schema {version}, which this kit cannot recompute")


def test_schema_2_cannot_be_made_from_records_with_short_responses() -> None:
    # schema 2 had no output-length guardrail: with a short response this kit cannot say what that kit wrote
    doc: dict[str, object] = {"schema_version": SUMMARY_SCHEMA_VERSION, "arm_levels": [{"short_responses": 0}]}
    assert as_schema(doc, 2) == {"schema_version": 2, "arm_levels": [{}]}
    assert as_schema({**doc, "arm_levels": [{"short_responses": 3}]}, 2) is None
    assert as_schema(doc, 1) is None and as_schema(doc, SUMMARY_SCHEMA_VERSION) is doc


def test_summary_schema_version_true_is_not_a_version(bundle: Bundle, runner: SigningKey, trust_file: Path) -> None:
    summary = summarize_bundle(bundle.root)
    summary["schema_version"] = True  # JSON true: not a number, so recomputed and found to differ
    bundle.remove_provenance()
    bundle.write_json("summary.json", summary)
    sign_provenance(bundle, runner, predicate={})
    _fails(bundle.root, [trust_file], "at schema_version")


def test_summary_recompute_failure_is_a_bundle_error(bundle: Bundle, trust_file: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(root: Path) -> dict[str, object]:
        raise ZeroDivisionError("no records")

    monkeypatch.setattr("kit.bundle.verify.summarize_bundle", broken)
    _fails(bundle.root, [trust_file], "summary.json: recomputing it from the records failed: ZeroDivisionError")


def test_bundle_without_summary_verifies(make_bundle: Callable[..., Bundle], runner: SigningKey,
                                         trust_file: Path) -> None:
    b = make_bundle(sign=False)
    os.unlink(b.path("summary.json"))
    sign_provenance(b, runner, predicate={})
    assert "no summary.json to recompute" in verify_bundle(b.root, [trust_file]).summary


def test_not_a_bundle(tmp_path: Path) -> None:
    (tmp_path / "x.zip").write_bytes(b"PK")
    _fails(tmp_path / "x.zip", [], "neither a bundle directory nor")


def test_an_archive_s_manifest_line_names_the_archive_not_its_gone_extraction(bundle: Bundle, trust_file: Path,
                                                                               tmp_path: Path) -> None:
    """A review: `kit verify ARCHIVE` named /tmp/kit-verify-.../manifest.yaml, a path gone once kit answered."""
    from kit.bundle import archive

    tar = tmp_path / "shared.tar.gz"
    archive(bundle.root, tar)
    line = next(x for x in verify_bundle(tar, [trust_file]).summary.splitlines() if "manifest approval" in x)
    assert "NOT trusted under your policy" in line and "kit-verify-" not in line, line
    assert f"{tar}/manifest.yaml" in line, line
