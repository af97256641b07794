"""``load.arrival`` in a manifest: what it accepts, what it refuses (with the field named) and what it plans."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError
from support.manifests import manifest_data, manifest_model, write_manifest

from kit.cli import main
from kit.plan import make_plan as plan_cells


def load(**fields: object) -> dict[str, object]:
    return manifest_data(load={"levels": [8, 16], **fields})


def test_open_loop_levels_carry_their_rates_into_the_plan() -> None:
    m = manifest_model(load(requests_per_level=[20, 40], arrival={"process": "poisson", "rates": [2, 4.5]}))
    levels = plan_cells(m).levels
    assert [(lv.concurrency, lv.rate, lv.requests) for lv in levels] == [(8, 2.0, 20), (16, 4.5, 40)]
    assert "rate" in plan_cells(m).as_dict()["levels"][0]
    closed = plan_cells(manifest_model(load())).as_dict()["levels"][0]
    assert "rate" not in closed  # a closed-loop plan.json is what it was


def test_time_limited_levels_schedule_rate_times_duration() -> None:
    m = manifest_model(load(arrival={"process": "gamma", "rates": [3, 10], "burstiness": 0.5, "duration_s": 4}))
    assert [lv.requests for lv in plan_cells(m).levels] == [12, 40]
    closed = manifest_model(load(arrival={"duration_s": 30}))
    assert [lv.requests for lv in plan_cells(closed).levels] == [1_000_000, 1_000_000]  # a ceiling


@pytest.mark.parametrize(("arrival", "says"), [
    ({"process": "poisson"}, "needs arrival.rates"),
    ({"rates": [1, 2]}, "closed loop has none"),
    ({"process": "poisson", "rates": [1]}, "arrival.rates has 1 entries but there are 2 levels"),
    ({"process": "poisson", "rates": [1, 2], "burstiness": 0.5}, "use process gamma"),
    ({"process": "gamma", "rates": [1, 0]}, "greater than 0"),
    ({"process": "uniform", "rates": [1, 2]}, "closed"),
    ({"window": "middle"}, "'all' or 'steady'"),
    ({"duration_s": -1}, "greater than 0"),
])
def test_bad_arrivals_are_refused_with_the_reason(arrival: dict[str, object], says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        manifest_model(load(arrival=arrival))


def test_validate_names_the_arrival_field_and_exits_3(tmp_path: Path) -> None:
    path = write_manifest(tmp_path / "m.yaml", load(arrival={"process": "gamma", "rates": [1, 2], "burstiness": 0}))
    r = CliRunner().invoke(main, ["validate", str(path)])
    assert r.exit_code == 3, r.output
    assert "burstiness" in r.output
