"""`kit reproduce --until-decided` on bundles of simulated records (``until_helpers``): the looks the run loop takes
after each block stop once the verdict is decided (a faithful re-run: reproduced; a vanished effect: inconsistent),
each look is written as ``reproduce-looks/<k>.json`` in the bundle schema, ``kit verify``'s check recomputes them
and names a tampered one, the summary calls the cells never needed ``not_run``, and the sources and resumes it
refuses say why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from until_helpers import drop_cells_after, new_run, original, spec

from kit.errors import UsageError
from kit.experiment.looks import needed_cells
from kit.experiment.stoprule import same_rule
from kit.files.reproduce_looks import ReproduceLookFile
from kit.files.schema import validate_bundle_files
from kit.hints import reproduce_command
from kit.manifest import load_manifest
from kit.plan import make_plan
from kit.reproduce.looks import FLAG, ReproduceLooks, UntilDecided, check_reproduce_looks
from kit.reproduce.until import refuse_unless_possible
from kit.stats import summary_of

ROOT = Path(__file__).resolve().parents[2]


def looks_of(root: Path) -> tuple[ReproduceLooks, list[str]]:
    from kit.bundle import Bundle
    m = load_manifest(root / "manifest.yaml").manifest
    looks = ReproduceLooks(m, make_plan(m), Bundle(root, "test"))
    return looks, looks.take_due()


def test_a_faithful_rerun_stops_reproduced_and_verify_recomputes_every_look(tmp_path: Path) -> None:
    src = original(tmp_path / "orig", spec(8, 0.6, 1))
    b = new_run(tmp_path / "new", src, spec(8, 0.6, 2))
    looks, lines = looks_of(b.root)
    last = looks.done[-1]
    assert looks.stopped and last["stop"] == "decided" and last["verdict"] == "reproduced"
    assert last["look"] < last["of"] == 4, lines  # before the maximum
    assert lines[-1].startswith(f"reproduce look {last['look']} of 4") and "every judged effect reproduced" in lines[-1]
    c = last["comparisons"][0]
    assert c["decision"] == "reproduced" and c["claimed"] and c["fraction"] == pytest.approx(last["look"] / 4)
    assert looks.done[0]["comparisons"][0]["tested"] is False  # look 1: the new run's SE on one df
    note, problems = check_reproduce_looks(b.root)
    assert problems == [] and note is not None and f"{last['look']} reproduce look(s) recomputed" in note
    schema = json.loads((ROOT / "bundle.schema.json").read_text())
    only = tmp_path / "only-looks"  # the simulated cells carry fewer fields than kit's: the looks alone
    shutil.copytree(b.root / "reproduce-looks", only / "reproduce-looks")
    assert set(validate_bundle_files(only, schema)) == {f"reproduce-looks/{k:03d}.json"
                                                         for k in range(1, last["look"] + 1)}
    for k in range(1, last["look"] + 1):
        ReproduceLookFile.model_validate_json((b.root / f"reproduce-looks/{k:03d}.json").read_text())

    # what the stopped run never ran: not_run in the summary (not failed), and not needed by a resume
    gone = drop_cells_after(b.root, 2 * last["look"])
    s = summary_of(b.root)
    assert {c["id"] for c in s["cells"] if c["status"] == "not_run"} == set(gone) and s["failed_cells"] == []
    assert all("--until-decided stopped at look" in c["reason"] for c in s["cells"] if c["status"] == "not_run")
    m = load_manifest(b.root / "manifest.yaml").manifest
    assert {c.id for c in needed_cells(m, make_plan(m), looks.bundle)} | set(gone) == {c.id for c in make_plan(m).cells}
    assert looks_of(b.root)[1] == []  # nothing more is due

    # a tampered look: kit verify's check names it
    p = b.root / "reproduce-looks" / "002.json"
    doc = json.loads(p.read_text())
    doc["comparisons"][0]["p_upper"] = 0.5
    p.write_text(json.dumps(doc))
    _, problems = check_reproduce_looks(b.root)
    assert len(problems) == 1 and problems[0].startswith("reproduce-looks/002.json: differs from the look "
                                                         "recomputed") and "p_upper" in problems[0]


def test_a_vanished_effect_stops_inconsistent(tmp_path: Path) -> None:
    src = original(tmp_path / "orig", spec(8, 0.6, 1))
    b = new_run(tmp_path / "new", src, spec(8, 1.0, 2))
    looks, _ = looks_of(b.root)
    last = looks.done[-1]
    assert last["stop"] == "decided" and last["verdict"] == "inconsistent" and last["look"] == 2
    assert last["comparisons"][0]["zero_rejected_at_look"] == 2


def test_a_noisy_rerun_runs_to_its_maximum_and_says_when_it_cannot_reach_reproduced(tmp_path: Path) -> None:
    src = original(tmp_path / "orig", spec(6, 0.9, 1, cell_sd=0.15))
    b = new_run(tmp_path / "new", src, spec(6, 0.9, 11, cell_sd=0.15))
    looks, lines = looks_of(b.root)
    assert [d["stop"] for d in looks.done] == [None, None, "max_repeats"] and looks.done[-1]["final"] is True
    last = looks.done[-1]["comparisons"][0]
    assert last["fraction"] == 1.0 and last["decision"] == "imprecise" and looks.done[-1]["verdict"] == "imprecise"
    assert looks.done[1]["comparisons"][0]["reachable"] is False
    assert "cannot show equivalence even if nothing changed" in looks.done[1]["notes"][0]
    assert "the maximum: look 3 of 3" in lines[-1]


def test_sources_it_cannot_reproduce_so_are_refused_naming_the_flag(tmp_path: Path) -> None:
    def manifest(extra: str, repeats: int = 6, order: str = "interleaved") -> object:
        p = tmp_path / f"m{len(list(tmp_path.iterdir()))}.yaml"
        from until_helpers import MANIFEST
        p.write_text(MANIFEST.format(repeats=repeats, extra=extra).replace("order: interleaved", f"order: {order}"))
        return load_manifest(p).manifest

    refuse_unless_possible(manifest(""))  # type: ignore[arg-type]
    cases = [(manifest("  reproduce:\n    same_hardware: true\n"), "same_hardware"),
             (manifest("", order="random"), "order random"), (manifest("", repeats=2), "repeats 2"),
             (manifest("", repeats=5), "repeats 5")]
    for m, why in cases:
        with pytest.raises(UsageError, match="--until-decided") as e:
            refuse_unless_possible(m)  # type: ignore[arg-type]
        assert why in str(e.value) and e.value.exit_code == 2
    seq = load_manifest(ROOT / "experiments" / "demo-levels.yaml").manifest
    with pytest.raises(UsageError, match=r"design\.sequential"):
        refuse_unless_possible(seq)


def test_a_resume_keeps_the_stop_rule_it_was_started_with(tmp_path: Path) -> None:
    root = tmp_path / "b"
    root.mkdir()
    rule = UntilDecided(tmp_path)
    (root / "run.json").write_text(json.dumps({"run_id": "abc123", "flags": {"allow_unsigned": False, FLAG: True}}))
    same_rule(root, rule, "hint")
    with pytest.raises(UsageError, match="started with --until-decided") as e:
        same_rule(root, None, "kit reproduce SOURCE --resume BUNDLE --until-decided")
    assert e.value.exit_code == 2
    (root / "run.json").write_text(json.dumps({"run_id": "abc123", "flags": {"allow_untrusted_source": True}}))
    same_rule(root, None, "hint")
    with pytest.raises(UsageError, match=r"--until-decided: .* was started without it"):
        same_rule(root, rule, "hint")
    hint = reproduce_command(tmp_path / "s.tar.gz", root, trust=[], allow_untrusted_source=False, allow_unsigned=False,
                             allow_unpinned=False, key=None, project=None, until_decided=True)
    assert hint.endswith("--until-decided") and "--resume" in hint
