"""A refused manifest's messages quote its values at most ``safeyaml.MAX_QUOTE`` characters long and state the limit
(review: 49,000 levels made one line of 147 KB, "load.levels: [1, 1, 1, ...] is too long", without the maximum)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kit import safeyaml
from kit.errors import ManifestError
from kit.manifest import load_manifest
from kit.safeyaml import MAX_QUOTE, excerpt

ROOT = Path(__file__).resolve().parents[2]
DEMO = (ROOT / "experiments" / "demo.yaml").read_text()


def _refused(tmp_path: Path, text: str) -> list[str]:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(ManifestError) as e:
        load_manifest(path)
    return str(e.value).splitlines()


def _edit(old: str, new: str) -> str:
    assert old in DEMO
    return DEMO.replace(old, new)


def test_too_many_levels_are_counted_and_the_maximum_named(tmp_path: Path) -> None:
    lines = _refused(tmp_path, _edit("levels: [1]\n  requests_per_level: [40]",
                                     "levels: [" + ", ".join(["1"] * 19_000) + "]"))
    problem = next(p for p in lines if "load.levels" in p)
    assert len(problem) < 2 * MAX_QUOTE
    assert "…]" in problem and "has 19000 items: too many (at most 64)" in problem


def test_a_long_string_is_cut_and_its_limit_named(tmp_path: Path) -> None:
    lines = _refused(tmp_path, _edit('"--layers", "4"]', '"--layers", "4", "' + "x" * 5000 + '"]'))
    problem = next(p for p in lines if "server.command" in p)
    assert len(problem) < 2 * MAX_QUOTE
    assert "has 5000 characters: too many (at most 4096)" in problem


@pytest.mark.parametrize("old, new, where", [
    ("port: 18080", 'port: "' + "1" * 3000 + '"', "server.port"),  # jsonschema's own wording, the value cut
    ("runtime: process", "runtime: process\n" + "k" * 1000 + ": 1", "unknown field"),  # a key, in the path too
    ("host: 127.0.0.1", "host: " + "h" * 300, "server.host"),  # over its maxLength
    ("host: 127.0.0.1", "host: " + "h" * 250, "server.host"),  # the model's rule: not an IP address
])
def test_every_problem_quotes_a_bounded_value(tmp_path: Path, old: str, new: str, where: str) -> None:
    problem = next(p for p in _refused(tmp_path, _edit(old, new)) if where in p)
    assert len(problem) < 4 * MAX_QUOTE + 300, problem
    assert "…" in problem and re.search(r"\(\d+ characters\)|has \d+ characters", problem)


def test_a_model_rule_quotes_a_bounded_value(tmp_path: Path) -> None:
    """A cross-field rule (pydantic, after the schema) that names the value: 1024 GPU indices, one named twice."""
    indices = ", ".join(["0"] * 1024)
    lines = _refused(tmp_path, DEMO.replace("runtime: process", f"runtime: process\nhardware:\n  gpus: 1024\n"
                                                                f"  gpu_indices: [{indices}]"))
    problem = next(p for p in lines if "gpu_indices" in p)
    assert len(problem) < 2 * MAX_QUOTE + 100 and "(1024 items)" in problem


def test_a_yaml_refusal_quotes_a_bounded_value() -> None:
    with pytest.raises(safeyaml.YamlError) as e:  # 1e5000: a float YAML reads as infinity
        safeyaml.load(b"a: 1" + b"0" * 5000 + b".0\n")
    assert "not a finite number" in e.value.message and len(e.value.message) < MAX_QUOTE + 100
    with pytest.raises(safeyaml.YamlError) as e:
        safeyaml.load(b"k" * 1000 + b": 1\n" + b"k" * 1000 + b": 2\n")
    assert "duplicate key" in e.value.message and len(e.value.message) < MAX_QUOTE + 100


def test_excerpt() -> None:
    assert excerpt("short") == "'short'" and excerpt([1, 2]) == "[1, 2]" and excerpt(3.5) == "3.5"
    assert excerpt("x" * 500) == "'" + "x" * (MAX_QUOTE - 1) + "…' (500 characters)"
    cut = excerpt(list(range(1000)))
    assert cut.startswith("[0, 1, 2, ") and cut.endswith(", …] (1000 items)") and len(cut) < MAX_QUOTE + 30
    assert excerpt({str(i): i for i in range(100)}).endswith(", …} (100 entries)")
    assert excerpt([1] * 100, count=False).endswith(", …]")
