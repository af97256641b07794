"""Sealing a reproduction into the new bundle, with a deliberately different re-run: the oea arm started with
another --oea-k0 and 30 % slower. The verdict says "inconsistent" at every level for oea's effect, the
setup names the changed argument, the new bundle verifies and names its source, and the verdict can be recomputed
from the new bundle alone (source/summary.json, signed by the source's runner, and summary.json)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from reproduce_helpers import signed
from support.bundles import ArmModel

from kit.bundle import PROVENANCE, Bundle, verify_bundle
from kit.bundle.verify import read_envelope, signed_subjects
from kit.cli_reference import EXIT_MEANINGS
from kit.errors import ExitCode, Inconsistent
from kit.files.reproduce import ReproduceFile
from kit.files.run import RunFile
from kit.files.schema import validate_bundle_files
from kit.files.summary import Summary
from kit.reproduce import ReproduceOptions, ReproduceResult, seal
from kit.reproduce.decide import Rule
from kit.reproduce.render import headline
from kit.reproduce.source import opened
from kit.reproduce.verdict import judge, overall
from kit.signing import generate_key

ROOT = Path(__file__).resolve().parents[2]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


Sealed = tuple[Bundle, Bundle, ReproduceFile, Path]


@pytest.fixture(scope="module")
def sealed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sealed]:
    """Built once for the module: an original (oea with --oea-k0 4) and a re-run (--oea-k0 2, oea 30 % slower),
    sealed as a reproduction of the original; with its own config dir and a policy trusting the runner."""
    tmp = tmp_path_factory.mktemp("sealed")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(tmp / "config"))
        runner = generate_key(tmp / "runner_ed25519", "kit-runner@testhost")
        trust = tmp / "allowed_signers"
        trust.write_text(f'runner namespaces="kit-bundle" {runner.public_line()}\n')
        original = signed(tmp / "original", runner, k0="4")
        new = signed(tmp / "new", runner, k0="2", arms={"base": ArmModel(), "oea": ArmModel(itl_factor=1.3)})
        with opened(original.root, [trust], allow_untrusted=False) as src:
            report = seal(src, new.root, ReproduceOptions(source=original.root, key=runner.path, trust=[trust]))
        yield original, new, report, trust


def test_a_different_rerun_is_inconsistent_and_the_difference_is_named(
        sealed: Sealed) -> None:
    _, new, report, _ = sealed
    assert report.verdict == "inconsistent" and report.primary == "tpot_mean_ms" and report.margin == 0.05
    assert report.effect_margin == 0.5 and report.same_hardware is False
    verdicts = {(c.kind, c.arm, c.level): c.verdict for c in report.comparisons}
    assert verdicts == {("arm", "base", 1): None, ("arm", "base", 4): None, ("arm", "oea", 1): None,
                        ("arm", "oea", 4): None, ("effect", "oea", 1): "inconsistent",
                        ("effect", "oea", 4): "inconsistent"}
    assert report.counts == {"reproduced": 0, "inconsistent": 2, "imprecise": 0}
    oea = {i.arm: i for i in report.images}
    assert oea["base"].status == "identical"
    assert oea["oea"].status == "different" and oea["oea"].differences == ["argument 8: 4 originally, 2 now"]
    assert report.conclusion_held is False
    line = headline(report)
    assert line.startswith("verdict: INCONSISTENT: 2 of 2 judged comparisons of tpot_mean_ms outside the original's "
                           "prediction interval (0 reproduced, 0 imprecise); arms moved ×1.000 to ×1.299"), line
    assert line.endswith("between the machines (not judged); the A/B conclusion DID NOT HOLD (0 of 2 judged "
                         "level(s) held)"), line
    md = new.path("reproduce.md").read_text()
    assert "INCONSISTENT" in md and "argument 8: 4 originally, 2 now" in md
    assert md.index("## Setup") < md.index("## Verdicts")  # the setup comes first


def test_the_new_bundle_verifies_and_names_its_source(sealed: Sealed) -> None:
    original, new, report, trust_file = sealed
    res = verify_bundle(new.root, [trust_file])
    prov = _sha(original.path(PROVENANCE))
    assert f"reproduces {original.root.name} (run {original.run_id}, provenance sha256 {prov})" in res.summary
    assert "inconsistent (reproduce.json)" in res.summary
    run = new.read("run.json", RunFile)
    assert run.reproduces is not None and run.reproduces.source.provenance_sha256 == prov
    assert run.reproduces.verdict == "inconsistent" and run.reproduces.source == report.source
    # the signed provenance names the source bundle by its provenance digest
    _, _, stmt = read_envelope(new.path(PROVENANCE), "new")
    build = stmt["predicate"]["buildDefinition"]
    assert build["externalParameters"]["reproduces"]["provenance"] == {"sha256": prov}
    dep = [d for d in build["resolvedDependencies"] if d["uri"].startswith("kit-bundle:")]
    assert dep == [{"uri": f"kit-bundle:demo/{original.run_id}", "name": f"{original.root.name}/{PROVENANCE}",
                    "digest": {"sha256": prov},
                    "annotations": {"role": "reproduced source bundle",
                                    "manifest_sha256": _sha(original.path("manifest.yaml"))}}]
    assert build["internalParameters"] == {"runtime": "process"}  # the run's own pieces are kept
    subjects = signed_subjects(stmt, "new")
    for name in ("reproduce.json", "reproduce.md", "source/summary.json", f"source/{PROVENANCE}"):
        assert name in subjects


def test_the_verdict_can_be_recomputed_from_the_new_bundle_alone(
        sealed: Sealed) -> None:
    original, new, report, _ = sealed
    # source/ holds the source's own bytes; its provenance (signed by the source's runner) names their sha256
    assert new.path(f"source/{PROVENANCE}").read_bytes() == original.path(PROVENANCE).read_bytes()
    _, _, stmt = read_envelope(new.path(f"source/{PROVENANCE}"), "source")
    signed = signed_subjects(stmt, "source")
    for name in ("summary.json", "run.json", "plan.json", "environment.json"):
        assert signed[name] == _sha(new.path(f"source/{name}"))
    before = Summary.model_validate(json.loads(new.path("source/summary.json").read_text()))
    after = Summary.model_validate(json.loads(new.path("summary.json").read_text()))
    rule = Rule(report.effect_margin or 0.5, report.margin, 1 - report.confidence)
    comps, concl = judge(before, after, rule, same_hardware=report.same_hardware)
    assert [c.model_dump() for c in comps] == [c.model_dump() for c in report.comparisons]
    assert overall(comps) == report.verdict and [c.text for c in concl] == [c.text for c in report.conclusions]
    stored = ReproduceFile.model_validate(json.loads(new.path("reproduce.json").read_text()))
    assert stored == report


def test_every_json_file_validates_against_the_checked_in_schema(
        sealed: Sealed) -> None:
    _, new, _, _ = sealed
    schema = json.loads((ROOT / "bundle.schema.json").read_text())
    # the files kit reproduce writes (the synthetic bundle's own cells are not all shaped as kit run writes them)
    mine = {k: v for k, v in schema["x-kit-files"].items() if k in (
        "reproduce.json", "run.json", "source/summary.json", "source/run.json", "source/plan.json",
        f"source/{PROVENANCE}")}
    checked = set(validate_bundle_files(new.root, {**schema, "x-kit-files": mine}))
    assert checked == {"reproduce.json", "run.json", "source/summary.json", "source/run.json", "source/plan.json",
                       f"source/{PROVENANCE}"}


def test_the_exit_code_of_each_verdict(sealed: Sealed) -> None:
    _, new, report, _ = sealed
    with pytest.raises(Inconsistent) as e:
        ReproduceResult(new.root, report, []).raise_for_verdict()
    assert e.value.exit_code == ExitCode.NOT_REPRODUCED == 10 and "reproduce.md" in str(e.value)
    imprecise = report.model_copy(update={"verdict": "imprecise"})
    with pytest.raises(Exception) as e2:
        ReproduceResult(new.root, imprecise, []).raise_for_verdict()
    assert getattr(e2.value, "exit_code", None) == ExitCode.INCONCLUSIVE == 11
    ReproduceResult(new.root, report.model_copy(update={"verdict": "reproduced"}), []).raise_for_verdict()
    assert set(EXIT_MEANINGS) == set(ExitCode)  # docs/cli.md's table names every exit code
