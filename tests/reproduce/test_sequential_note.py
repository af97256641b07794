"""A reproduction of a sequential original says what the design did: each run stopped on its own A/B looks, and the
verdict is the fixed-sample rule on the cells each run used (docs/reproduce.md, "Sequential originals"); a fixed
design gets no such note. On a bundle of simulated records whose sequential run stops at its second look."""

from __future__ import annotations

from pathlib import Path

from kit.bundle import Bundle
from kit.experiment.looks import Looks
from kit.files.summary import Summary
from kit.manifest import load_manifest
from kit.plan import make_plan
from kit.reproduce.run import sequential_note
from kit.stats import summary_of
from tests.support.bundles import ArmModel, BundleSpec, make_bundle


def test_the_note_names_each_runs_stop(tmp_path: Path) -> None:
    spec = BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=0.6)}, repeats=6, levels=(1, 4),
                      requests=24, cell_sd=0.02, cell_level_sd=0.005)
    root = make_bundle(tmp_path / "b", spec)
    m = load_manifest(root / "manifest.yaml").manifest
    Looks(m, make_plan(m), Bundle(root, "test")).take_due()  # the looks the run loop takes after each block
    s = Summary.model_validate(summary_of(root))
    assert s.sequential is not None and s.sequential.stop == "decided"
    note = sequential_note(s, s)
    assert note is not None and note.count("decided at look 2 of 3") == 2 and "(8 of 12 cells)" in note
    assert "not on this verdict" in note
    fixed = s.model_copy(update={"sequential": None})
    assert sequential_note(fixed, fixed) is None
