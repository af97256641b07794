"""The setup diff and the image identities from what two bundles recorded: images.json as the docker runtime
writes it (identical, the same recipe with another ID, another recipe), server commands, environment.json facts
(GPUs, driver, CUDA, CPU, kernel, packages, Docker) and the load client's figures."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kit.bundle import Bundle, sign_provenance
from kit.files.images import BuiltImage
from kit.plumbing.treedigest import tree_digest
from kit.reproduce.identity import command_identity, identities, image_identity
from kit.reproduce.run import notes
from kit.reproduce.setup import client_rows, model_tree, setup_rows
from kit.reproduce.source import opened
from kit.signing import SigningKey

LAYERS = [f"sha256:{i:064x}" for i in range(1, 6)]


def image(**changes: Any) -> BuiltImage:
    base = {"image_id": "sha256:" + "a" * 64, "reference": "python:3.11@sha256:" + "b" * 64,
            "base_image_id": "sha256:" + "c" * 64, "dockerfile_sha256": "d" * 64, "context_sha256": "e" * 64,
            "build_args": {"BASE_IMAGE": "python:3.11"}, "base_arm": None, "diff_ids": LAYERS, "os": "linux",
            "architecture": "amd64", "recipe_sha256": "f" * 64}
    return BuiltImage.model_validate({**base, **changes})


def test_identical_images() -> None:
    i = image_identity("oea", image(), image())
    assert i.status == "identical" and i.differences == []


def test_another_id_from_the_same_recipe_names_where_the_layers_part() -> None:
    i = image_identity("oea", image(), image(image_id="sha256:" + "9" * 64, diff_ids=[*LAYERS[:3], "sha256:x", "y"]))
    assert i.status == "same_recipe"
    assert i.differences[0].startswith("image ID sha256:aaaa")
    assert i.differences[-1] == "3 of 5 layers (diff_ids) are the same (first at layer 4)"
    same_layers = image_identity("oea", image(), image(image_id="sha256:" + "9" * 64))
    assert same_layers.differences[-1] == "every one of the 5 layers (diff_ids) is the same: only the image config " \
                                          "differs"


def test_another_recipe_is_named_field_by_field() -> None:
    i = image_identity("oea", image(), image(image_id="sha256:" + "9" * 64, context_sha256="0" * 64,
                                              build_args={"BASE_IMAGE": "python:3.12"}))
    assert i.status == "different"
    text = "\n".join(i.differences)
    assert "build context sha256: eeee" in text and "build args:" in text and "python:3.12" in text
    assert "Dockerfile" not in text  # unchanged fields are not listed


def test_missing_images_and_commands() -> None:
    assert image_identity("oea", None, image()).status == "not_recorded"
    assert command_identity("oea", None, ["python"]).status == "not_recorded"
    c = command_identity("oea", ["python", "-m", "kit.engine", "--oea-k0", "4"],
                         ["python", "-m", "kit.engine", "--oea-k0", "2", "--x"])
    assert c.status == "different"
    assert c.differences == ["argument 4: 4 originally, 2 now", "5 arguments originally, 6 now"]


def _bundle(root: Path, env: dict[str, Any], images: dict[str, Any], kit_version: str = "0.1.0",
            bound: bool = False) -> Path:
    root.mkdir(parents=True)
    (root / "manifest.yaml").write_text("name: x\n")
    (root / "run.json").write_text(json.dumps({"run_id": "abc", "kit_version": kit_version,
                                               "flags": {"allow_unsigned": False}}))
    (root / "environment.json").write_text(json.dumps(env))
    (root / "images.json").write_text(json.dumps(images))
    cells = [{"index": i, "arm": a, "repeat": 1, "id": f"{a}-r1"} for i, a in enumerate(("base", "oea"))]
    (root / "plan.json").write_text(json.dumps({"order": "interleaved", "cells": cells,
                                                "levels": [{"concurrency": 4, "requests": 8, "warmup": 0}]}))
    for c in cells:
        d = root / "cells" / c["id"] / "level-4"
        d.mkdir(parents=True)
        (d / "client.json").write_text(json.dumps({
            "schema": 1, "spec": {}, "processes": 1, "usable_cores": 8, "ok": 8, "errors": 0, "out_tokens": 64,
            "wall_s": 1.0, "tokens_per_s": 64.0, "stopped": False, "client_bound": bound and c["arm"] == "oea",
            "client_bound_reasons": [], "timing_warnings": [], "thresholds": {},
            "workers": [{"worker": 0, "cpu_share": 0.4 if bound else 0.1, "lag": {"samples": 9, "p99_ms": 1.5}}]}))
    return root


def _env(gpu: str, driver: str, cuda: str, numpy: str, engine: str) -> dict[str, Any]:
    return {"host": {"cpu": {"model": "EPYC", "usable_cores": 8, "logical_cores": 16}, "kernel": {"release": "6.1",
                     "machine": "x86_64"}, "os": {"PRETTY_NAME": "Debian 12"}, "python": {"version": "3.11.7"},
                     "packages": {"numpy": numpy, "scipy": "1.14"}, "memory_total_bytes": 1},
            "gpus": {"driver_version": driver, "cuda_driver_version": cuda, "gpus": [{"name": gpu}, {"name": gpu}]},
            "runtime": {"runtime": "docker", "engine_version": engine, "storage_driver": "overlay2"}}


def test_the_setup_diff_names_what_differs(tmp_path: Path) -> None:
    a = _bundle(tmp_path / "a", _env("NVIDIA H100", "550.54", "12.4", "1.26.4", "27.1"), {"oea": image().model_dump()})
    b = _bundle(tmp_path / "b", _env("NVIDIA H200", "560.35", "12.6", "2.0.0", "28.2"),
                {"oea": image(image_id="sha256:" + "9" * 64).model_dump()}, kit_version="0.2.0", bound=True)
    rows = {r.what: r for r in setup_rows(a, b)}
    assert rows["GPUs"].original == "2 x NVIDIA H100" and rows["GPUs"].new == "2 x NVIDIA H200"
    assert not rows["GPU driver"].same and not rows["CUDA driver"].same and not rows["kit version"].same
    assert rows["Python packages"].note == "numpy 1.26.4 → 2.0.0" and not rows["Python packages"].same
    assert not rows["Docker engine"].same and rows["Docker storage"].same
    assert rows["manifest.yaml sha256"].same and rows["CPU"].same and rows["plan (cells, order, levels)"].same
    ids = identities(["oea"], "docker", a, b)
    assert ids[0].status == "same_recipe"
    client = client_rows(a, b, [4])
    assert [(c.run, c.client_bound_cells, c.cpu_share_max) for c in client] == [
        ("original", [], 0.1), ("new", ["oea-r1"], 0.4)]
    assert client[0].lag_p99_ms_max == 1.5 and client[1].usable_cores == 8


def _with_model(b: Bundle, runner: SigningKey, model: Path | None, error: str | None = None) -> Bundle:
    """Re-sign ``b`` with the model entry kit.experiment.finish records when model.digest is on (a file:// entry
    with the directory's sha256 tree), or none (model.digest off)."""
    deps: list[dict[str, Any]] = []
    if model is not None:
        digest = {} if error else {"sha256": tree_digest(model).digest}
        deps.append({"uri": f"file://{model}", "digest": digest,
                     "annotations": {"model.path": str(model), **({"error": error} if error else {})}})
    sign_provenance(b, runner, predicate={"internalParameters": {"runtime": "process"}, "resolvedDependencies": deps})
    return b


def test_the_model_sha256_tree_is_compared_from_both_signed_provenances(
        signed_bundle: Callable[..., Bundle], runner: SigningKey, tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(b"\0" * 1000)
    (model / "config.json").write_text('{"layers": 2}')
    original = _with_model(signed_bundle("orig"), runner, model)
    same = _with_model(signed_bundle("same"), runner, model)
    want = "sha256:" + tree_digest(model).digest
    assert model_tree(original.root) == want
    row = next(r for r in setup_rows(original.root, same.root) if r.what == "model sha256 tree")
    assert row.same and row.original == row.new == want
    (model / "weights.bin").write_bytes(b"\1" + b"\0" * 999)  # one byte of the weights changed
    changed = _with_model(signed_bundle("changed"), runner, model)
    row = next(r for r in setup_rows(original.root, changed.root) if r.what == "model sha256 tree")
    assert not row.same and row.original == want and row.new != want and "differ" in row.note
    unread = _with_model(signed_bundle("unread"), runner, model, error="Permission denied")
    assert model_tree(unread.root) == "not hashed: Permission denied"
    off = _with_model(signed_bundle("off"), runner, None)
    row = next(r for r in setup_rows(original.root, off.root) if r.what == "model sha256 tree")
    assert not row.same and row.new is None and "model.digest was off in the new run" in row.note
    plain = _with_model(signed_bundle("plain"), runner, None)
    assert not any(r.what == "model sha256 tree" for r in setup_rows(off.root, plain.root))


def test_not_hashed_is_said_only_when_model_digest_is_off(signed_bundle: Callable[..., Bundle],
                                                          trust_file: Path) -> None:
    b = signed_bundle()
    with opened(b.root, [trust_file], allow_untrusted=False) as src:
        run = src.run
        off = notes(src, run, True, "process", "/models/m", model_digest=False)
        on = notes(src, run, True, "process", "/models/m", model_digest=True)
    assert any("not hashed (model.digest is off)" in n for n in off)
    assert not any("not hashed" in n for n in on) and any("sha256 tree" in n for n in on)


def _serving(b: Bundle, model: Path) -> Bundle:
    """Every cell's server.json: a server started on ``model``'s absolute path (as kit_hf.serve is)."""
    for d in sorted(b.path("cells").iterdir()):
        argv = ["/usr/bin/python3", "-m", "kit_hf.serve", str(model), "--served-name", "m", "--port", "18080"]
        b.write_json(f"cells/{d.name}/server.json", {"schema_version": 1, "command": argv, "pid": 1})
    return b


def test_a_model_path_with_the_same_sha256_tree_is_not_a_difference(
        signed_bundle: Callable[..., Bundle], runner: SigningKey, tmp_path: Path) -> None:
    """The same model files at another absolute path on the new machine (the H200 re-run's case): both signed
    provenances record the same sha256 tree, so the server commands are identical, the path named as such; another
    tree at another path, or a path not hashed, stays a difference."""
    here, there = tmp_path / "here" / "m", tmp_path / "there" / "m"
    for d in (here, there):
        d.mkdir(parents=True)
        (d / "weights.bin").write_bytes(b"\0" * 1000)
    original = _with_model(_serving(signed_bundle("orig"), here), runner, here)
    moved = _with_model(_serving(signed_bundle("moved"), there), runner, there)
    ids = identities(["base", "oea"], "process", original.root, moved.root)
    assert [i.status for i in ids] == ["identical", "identical"]
    assert "the model path" in ids[0].differences[0] and "same sha256 tree" in ids[0].differences[0]
    (there / "weights.bin").write_bytes(b"\1" + b"\0" * 999)
    other = _with_model(_serving(signed_bundle("other"), there), runner, there)
    ids = identities(["base", "oea"], "process", original.root, other.root)
    assert [i.status for i in ids] == ["different", "different"] and "argument 3" in ids[0].differences[0]
    unhashed = _with_model(_serving(signed_bundle("unhashed"), there), runner, None)
    assert identities(["base"], "process", original.root, unhashed.root)[0].status == "different"
