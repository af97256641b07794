"""Design order: counterbalanced ABBA with a random start (seeded by design.seed, recorded in plan.json) is the
default; interleaved stays available."""

from __future__ import annotations

from support.manifests import manifest_data, manifest_model

from kit.plan import make_plan


def arms_in_order(seed: int | None = None, order: str | None = None, repeats: int = 4) -> list[str]:
    design: dict[str, object] = {"repeats": repeats}
    if seed is not None:
        design["seed"] = seed
    if order is not None:
        design["order"] = order
    return [c.arm for c in make_plan(manifest_model(manifest_data(design=design))).cells]


def test_abba_is_the_default_and_counterbalanced() -> None:
    plan = make_plan(manifest_model(manifest_data(design={"repeats": 4})))
    assert plan.order == "abba"
    arms = [c.arm for c in plan.cells]
    first, second = plan.start or ()
    assert arms == [first, second, second, first] * 2
    assert plan.as_dict()["start"] == [first, second]
    assert plan.to_file().model_dump()["start"] == [first, second]  # recorded in plan.json


def test_abba_start_is_random_but_seeded() -> None:
    starts = {arms_in_order(seed=s)[0] for s in range(20)}
    assert len(starts) == 2  # both starts occur over seeds
    assert all(arms_in_order(seed=s) == arms_in_order(seed=s) for s in range(5))  # and each is reproducible


def test_interleaved_stays_available() -> None:
    arms = arms_in_order(order="interleaved", repeats=3)
    assert arms == [arms[0], arms[1]] * 3
    assert "start" not in make_plan(manifest_model(manifest_data(design={"order": "interleaved"}))).as_dict()
