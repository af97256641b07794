"""The --redo rule as `kit verify` recomputes it (kit.bundle.redo), over real signed bundles: a replaced attempt
is kept under redone/, recorded in run.json, and must show the reason recorded (client-bound, failed); the
statistics use the cell's re-run. A cell replaced because its result was unwelcome, an attempt not recorded, or a
record without its attempt fails verification naming it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.bundles import SIGNED_SPEC, build_bundle, write_cell

from kit.bundle import Bundle, sign_provenance, verify_bundle
from kit.bundle.redo import set_aside_for_redo, to_redo
from kit.errors import BundleError, UsageError
from kit.files.run import Redone
from kit.signing import SigningKey
from kit.stats import summarize_bundle

CELLS = ["base-r1", "oea-r1"]
BOUND = SIGNED_SPEC.__class__(**{**SIGNED_SPEC.__dict__, "client_bound": frozenset({("oea-r1", 4)})})
CLEAN = SIGNED_SPEC


def _redo(b: Bundle, key: SigningKey, records: list[Redone]) -> None:
    """What a resume with --redo leaves: each cell re-run (measured again, not client-bound), the records in
    run.json, the summary recomputed, the provenance signed again."""
    rng = np.random.default_rng(5)
    for r in records:
        write_cell(b.write_bytes, CLEAN, rng, r.cell.split("-")[0], 1, 1_800_000_000.0)
    run = json.loads(b.path("run.json").read_text())
    run["resumed"] = [{"at": "2025-01-02T00:00:00Z", "redone": [r.model_dump() for r in records]}]
    b.write_json("run.json", run)
    b.remove_provenance()
    b.write_json("summary.json", summarize_bundle(b.root))
    sign_provenance(b, key, predicate={"externalParameters": {}, "internalParameters": {}, "resolvedDependencies": []})


def test_a_client_bound_cell_re_run_verifies_and_the_statistics_use_the_re_run(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    b = build_bundle(tmp_path / "results", runner, spec=BOUND, sign=False)
    assert [lv["client_bound_cells"] for lv in summarize_bundle(b.root)["levels"]] == [[], ["oea-r1"]]
    assert to_redo(b.root, CELLS, ["client-bound"]) == ["oea-r1"] and to_redo(b.root, CELLS, ["failed"]) == []
    records = set_aside_for_redo(b, CELLS, ["client-bound"])
    assert [(r.cell, r.reason, r.attempt) for r in records] == [("oea-r1", "client-bound", "redone/oea-r1-a1")]
    assert records[0].why.startswith("level-4: process 0: CPU 97% of one core")
    assert not b.path("cells/oea-r1").exists() and b.path("redone/oea-r1-a1/level-4/client.json").is_file()
    _redo(b, runner, records)
    res = verify_bundle(b.root, [trust_file])  # the original stays, signed, beside the re-run
    assert res.details["trusted"] is True and b.path("redone/oea-r1-a1/level-4/records.jsonl").is_file()
    after = summarize_bundle(b.root)  # the statistics read cells/ only: the re-run, no longer client-bound
    assert [lv["client_bound_cells"] for lv in after["levels"]] == [[], []]
    assert not any(c["client_bound"] for c in after["comparisons"])


def test_a_cell_replaced_without_being_flagged_fails_verification(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    b = build_bundle(tmp_path / "results", runner, spec=CLEAN, sign=False)
    assert set_aside_for_redo(b, CELLS, ["client-bound", "failed"]) == []  # nothing qualifies: nothing moves
    moved = b.move_failed_attempt("oea-r1", to="redone")  # replaced by hand: its result was unwelcome
    _redo(b, runner, [Redone(cell="oea-r1", reason="client-bound", attempt="redone/oea-r1-a1", why="level-4: x")])
    assert moved.name == "oea-r1-a1"
    with pytest.raises(BundleError) as e:
        verify_bundle(b.root, [trust_file])
    assert "redone/oea-r1-a1: recorded as replaced for being client-bound (level-4: x), but its files show no such " \
           "thing" in e.value.message


@pytest.mark.parametrize("flaw", ["unrecorded", "missing"])
def test_an_unrecorded_attempt_or_a_record_without_one_fails(tmp_path: Path, runner: SigningKey, trust_file: Path,
                                                            flaw: str) -> None:
    b = build_bundle(tmp_path / "results", runner, spec=BOUND, sign=False)
    records = set_aside_for_redo(b, CELLS, ["client-bound"])
    if flaw == "unrecorded":
        _redo(b, runner, [])
        b.remove_provenance()
        write_cell(b.write_bytes, CLEAN, np.random.default_rng(1), "oea", 1, 1_800_000_000.0)
    else:
        b.path("redone/oea-r1-a1").rename(tmp_path / "gone")
        _redo(b, runner, records)
        b.remove_provenance()
    sign_provenance(b, runner, predicate={"externalParameters": {}, "internalParameters": {},
                                          "resolvedDependencies": []})
    with pytest.raises(BundleError) as e:
        verify_bundle(b.root, [trust_file])
    want = "a replaced attempt that run.json does not record" if flaw == "unrecorded" else "but not in the bundle"
    assert "redone/oea-r1-a1: " in e.value.message and want in e.value.message, e.value.message


def test_a_cell_a_sequential_look_was_taken_on_is_never_replaced(
        tmp_path: Path, runner: SigningKey, trust_file: Path) -> None:
    """A sequential run decided at its looks on the cells they name: a redo after them would change what a look saw
    (and kit verify's recomputation of it). Refused before anything moves; a cell no look used may still be."""
    b = build_bundle(tmp_path / "results", runner, spec=BOUND, sign=False)
    b.write_json("looks/001.json", {"look": 1, "cells": ["base-r1", "oea-r1"]})
    with pytest.raises(UsageError) as e:
        set_aside_for_redo(b, CELLS, ["client-bound"])
    assert "taken on oea-r1" in e.value.message and "run the experiment again" in (e.value.hint or "")
    assert b.path("cells/oea-r1/cell.json").is_file() and not b.path("redone").exists()
    b.write_json("looks/001.json", {"look": 1, "cells": ["base-r1"]})
    assert [r.cell for r in set_aside_for_redo(b, CELLS, ["client-bound"])] == ["oea-r1"]
