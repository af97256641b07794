from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit import safeyaml
from kit.cli import main
from kit.errors import ManifestError
from kit.manifest import Manifest, json_schema, load_manifest, schema_text

CORPUS = Path(__file__).parent / "manifests"
EXPECT: dict[str, list[str]] = json.loads((CORPUS / "bad_expect.json").read_text())


def test_corpus_is_large_and_complete() -> None:
    files = sorted(p.name for p in (CORPUS / "bad").iterdir())
    assert len(files) >= 60
    assert files == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_hostile_manifest_exit_3_names_field_and_line(name: str) -> None:
    result = CliRunner().invoke(main, ["validate", str(CORPUS / "bad" / name)])
    out = result.output
    assert result.exit_code == 3, out
    assert "Traceback" not in out
    for needle in EXPECT[name]:
        assert needle in out, f"{needle!r} not in {out!r}"
    # a line number is always given, either as FILE:N or as 'line N'
    assert f"{name}:" in out or "line " in out or "empty" in out or "no YAML document" in out


def test_fifty_megabyte_file_is_refused_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(50 * 1024 * 1024)
    result = CliRunner().invoke(main, ["validate", str(big)])
    assert result.exit_code == 3
    assert "52428800 bytes" in result.output and "limited" in result.output


def test_missing_file_and_directory(tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["validate", str(tmp_path / "nope.yaml"), str(tmp_path)])
    assert r.exit_code == 2  # the first failure's code: a missing file is a usage error in every command (issue 9)
    assert "no such file" in r.output and "is a directory" in r.output


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "experiments").glob("*.yaml")))
def test_shipped_manifests_are_valid_and_point_editors_at_the_schema(path: Path) -> None:
    lm = load_manifest(path)
    assert lm.raw == path.read_bytes()
    assert path.read_text().splitlines()[0] == "# yaml-language-server: $schema=../manifest.schema.json"


def test_checked_in_schema_equals_generated(root: Path) -> None:
    assert (root / "manifest.schema.json").read_text() == schema_text(), "run `kit schema -o manifest.schema.json`"


def test_schema_has_ids_and_descriptions() -> None:
    s = json_schema()
    assert s["$schema"].startswith("https://json-schema.org/")
    assert s["$id"] and s["description"]
    assert s["additionalProperties"] is False
    assert all(d.get("additionalProperties") is False for d in s["$defs"].values())
    described = [k for k, d in s["$defs"].items() if d.get("description")]
    assert len(described) == len(s["$defs"])


def test_schema_round_trip_shipped_manifests(root: Path) -> None:
    """A model dumped to JSON validates against the schema and loads back equal."""
    import jsonschema

    for path in (root / "experiments").glob("*.yaml"):
        m = load_manifest(path).manifest
        data = json.loads(m.model_dump_json())
        jsonschema.validate(data, json_schema())
        assert Manifest.model_validate(data) == m


def test_strict_types_no_coercion() -> None:
    base = load_manifest(Path("experiments/demo.yaml")).manifest.model_dump()
    base["server"]["port"] = "18080"
    with pytest.raises(Exception, match="port"):
        Manifest.model_validate(base)


def test_defaults(root: Path) -> None:
    m = load_manifest(root / "experiments/demo-levels.yaml").manifest
    assert m.baseline_arm == "baseline"
    assert [m.load.requests_at(c) for c in m.load.levels] == [32, 48, 64, 128]  # the demo's budgets
    big = m.model_copy(update={"load": m.load.model_copy(update={"requests_per_level": None})})
    assert big.load.requests_at(1) == 50 and big.load.requests_at(64) == 320


def test_unpinned_allowed_only_with_flag(tmp_path: Path) -> None:
    text = (CORPUS / "bad" / "unpinned-base.yaml").read_text()
    p = tmp_path / "m.yaml"
    p.write_text(text)
    with pytest.raises(ManifestError, match="not pinned"):
        load_manifest(p)
    lm = load_manifest(p, allow_unpinned=True)
    assert lm.manifest.unpinned_bases() == [("a", "lmsysorg/sglang:v0.5.23")]


def test_safeyaml_keeps_lines_and_rejects_aliases() -> None:
    doc = safeyaml.load(b"a: 1\nb:\n  - x\n  - y: 2\n")
    assert doc.data == {"a": 1, "b": ["x", {"y": 2}]}
    assert doc.line_of(("b", 1, "y")) == 4
    assert doc.line_of(("b", 1, "zz")) == 4
    with pytest.raises(safeyaml.YamlError, match="alias"):
        safeyaml.load(b"a: [1]\nb: *x\n")
    # YAML 1.1 booleans stay booleans and get refused by the schema, never coerced to strings
    assert safeyaml.load(b"a: no\n").data == {"a": False}


def test_an_integer_longer_than_any_field_takes_is_refused_with_its_line() -> None:
    """Python's int() refuses a literal of over 4300 digits with a ValueError that named no line or field: `kit
    validate` and `kit run` of a manifest with such a seed ended in 'internal error' (exit 1), review."""
    with pytest.raises(safeyaml.YamlError) as e:
        safeyaml.load(b"name: x\nseed: " + b"9" * 4400 + b"\n")
    assert e.value.line == 2 and "4400 characters" in e.value.message
    assert safeyaml.load(b"seed: " + b"9" * 90 + b"\n").data == {"seed": int("9" * 90)}


def test_alias_bomb_is_fast(tmp_path: Path) -> None:
    import time

    p = tmp_path / "bomb.yaml"
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i-1}"] * 10) + "]" for i in range(1, 30)]
    p.write_text("\n".join(lines) + "\n")
    t = time.monotonic()
    with pytest.raises(ManifestError):
        load_manifest(p)
    assert time.monotonic() - t < 5


def test_no_world_writable_surprises(root: Path) -> None:
    # the signature covers bytes: keep YAML out of git's line-ending conversion
    assert "*.yaml -text" in (root / ".gitattributes").read_text()
    assert os.access(root / "manifest.schema.json", os.R_OK)
