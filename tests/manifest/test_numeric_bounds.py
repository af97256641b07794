"""Every number a manifest gives is finite and bounded (review: request counts, timeouts and deadlines of 1e30
validated, `kit plan` estimated 2.8e29 minutes and a run would never end); the bounds are in kit.manifest.fields."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel, ValidationError

from kit.errors import ManifestError
from kit.manifest import Manifest, json_schema, load_manifest
from kit.manifest.fields import DAY_S, MAX_CONCURRENCY, MAX_REQUESTS, SEED_MAX
from kit.manifest.load import NUMPY_SEED_MAX, Load

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "experiments" / "demo.yaml").read_text()
HUGE = "1.0e+30"


def _manifest(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


def _set(text: str, field: str, value: str) -> str:
    """``text`` with ``section.key`` set to ``value``: its line replaced, or added at the top of its section (the
    section added at the end where there is none)."""
    section, key = field.split(".")
    lines = text.splitlines()
    if f"{section}:" not in lines:
        return text + f"{section}:\n  {key}: {value}\n"
    start = lines.index(f"{section}:") + 1
    end = next((i for i in range(start, len(lines)) if lines[i] and not lines[i].startswith((" ", "#"))), len(lines))
    at = next((i for i in range(start, end) if lines[i].startswith(f"  {key}:")), None)
    if at is None:
        lines.insert(start, f"  {key}: {value}")
    else:
        lines[at] = f"  {key}: {value}"
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("field, value", [
    ("load.requests_per_level", "1000000000000000000000000000000"),
    ("load.warmup_requests", "1000000000000000000000000000000"),
    ("load.request_timeout_s", HUGE),
    ("load.seed", str(2**64)),
    ("server.ready_timeout_s", HUGE),
    ("gates.port_deadline_s", HUGE),
    ("gates.gpu_deadline_s", HUGE),
    ("gates.gpu_memory_threshold_mib", str(2**40)),
    ("design.seed", str(-(2**64))),
])
def test_a_huge_number_is_refused_naming_the_field_and_the_maximum(tmp_path: Path, field: str, value: str) -> None:
    with pytest.raises(ManifestError, match=rf"{re.escape(field)}: .* (greater|less) than the m(ax|in)imum"):
        load_manifest(_manifest(tmp_path, _set(DEMO, field, value)))


@pytest.mark.parametrize("field, value", [
    ("load.request_timeout_s", str(DAY_S)),
    ("gates.port_deadline_s", str(DAY_S)),
    ("gates.gpu_deadline_s", f"{DAY_S}.0"),
    ("load.warmup_requests", str(MAX_REQUESTS)),
    ("load.seed", str(SEED_MAX)),
])
def test_the_bounds_themselves_are_accepted(tmp_path: Path, field: str, value: str) -> None:
    load_manifest(_manifest(tmp_path, _set(DEMO, field, value)))


def test_every_number_in_the_schema_has_a_maximum() -> None:
    """The one exception, load.levels' items, is bounded by the model (MAX_CONCURRENCY) after the open-loop rule,
    whose message explains a cap above the level's requests."""
    unbounded: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("integer", "number") and not {"maximum", "exclusiveMaximum", "const"} & set(node):
                unbounded.append(path)
            for k, v in node.items():
                walk(v, f"{path}/{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}/{i}")

    walk(json_schema(), "")
    assert unbounded == ["/$defs/Load/properties/levels/items"]


def test_a_level_over_the_concurrency_bound_is_refused() -> None:
    Load.model_validate({"levels": [MAX_CONCURRENCY]})
    with pytest.raises(ValidationError, match=rf"load.levels\[1\] = {MAX_CONCURRENCY + 1}: over"):
        Load.model_validate({"levels": [1, MAX_CONCURRENCY + 1]})


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused_by_the_models_too(bad: float) -> None:
    """YAML's .nan and .inf are refused while parsing; the models refuse them from any other source as well."""
    with pytest.raises(ValidationError):
        Load.model_validate({"levels": [1], "request_timeout_s": bad})
    with pytest.raises(ValidationError, match="not finite"):  # extra_body takes any JSON: not NaN, which is none
        Load.model_validate({"levels": [1], "request": {"extra_body": {"logit_bias": {"1": bad}}}})


def test_a_random_dataset_seed_must_fit_numpys_legacy_generator() -> None:
    """kit.workload.sources seeds numpy.random.RandomState with load.seed + the level: 0 to 2**32 - 1, or the run
    failed when it built the level's requests."""
    base = {"levels": [1, 4], "requests_per_level": 8, "dataset": {"kind": "random"}}
    Load.model_validate({**base, "seed": NUMPY_SEED_MAX - 4})
    for seed in (-1, NUMPY_SEED_MAX - 3):
        with pytest.raises(ValidationError, match=f"load.seed {seed}: the random dataset"):
            Load.model_validate({**base, "seed": seed})
    Load.model_validate({"levels": [1], "seed": -1})  # without the dataset any 64-bit seed


def test_every_model_of_the_manifest_refuses_non_finite_floats() -> None:
    seen: set[type[BaseModel]] = set()

    def models(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in seen:
            seen.add(tp)
            for f in tp.model_fields.values():
                models(f.annotation)
        for arg in get_args(tp):
            models(arg)

    models(Manifest)
    assert len(seen) > 20
    assert sorted(m.__name__ for m in seen if m.model_config.get("allow_inf_nan") is not False) == []
