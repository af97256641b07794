"""Bundles of simulated records for `kit reproduce --until-decided` (``tests.support.bundles``' records): a fixed
manifest of two arms at one level, ``repeats`` per arm interleaved (a look after every two repeats), an original
with its summary, and a new run's bundle whose ``source/`` holds the original's files as the stop rule copies them."""

from __future__ import annotations

import shutil
from pathlib import Path

from support.bundles import ArmModel, BundleSpec, write_bundle

from kit.bundle import Bundle
from kit.reproduce.looks import UntilDecided
from kit.stats import summarize_bundle

MANIFEST = """manifest_version: 1
name: tiny
runtime: process
model:
  served_name: kit-moe
server:
  command: ["{{python}}", "-m", "kit.engine", "--host", "{{host}}", "--port", "{{port}}"]
  port: 18080
arms:
  - name: baseline
  - name: oea
    args: ["--oea-k0", "1"]
load:
  levels: [1]
  requests_per_level: 24
  warmup_requests: 0
  output_tokens: 32
  seed: 7
design:
  repeats: {repeats}
  order: interleaved
analysis:
  resamples: 200
{extra}"""


def spec(repeats: int, oea: float, seed: int, cell_sd: float = 0.02) -> BundleSpec:
    return BundleSpec(arms={"baseline": ArmModel(), "oea": ArmModel(itl_factor=oea)}, repeats=repeats, levels=(1,),
                      requests=24, cell_sd=cell_sd, cell_level_sd=0.005, seed=seed)


def write_run(root: Path, s: BundleSpec, extra: str = "") -> Path:
    """A run's manifest, plan and cells (every planned cell: the test removes those a stop leaves unrun)."""
    def write(rel: str, data: bytes) -> None:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    root.mkdir(parents=True)
    (root / "manifest.yaml").write_text(MANIFEST.format(repeats=s.repeats, extra=extra))
    write_bundle(write, s)
    return root


def original(root: Path, s: BundleSpec, extra: str = "") -> Path:
    write_run(root, s, extra)
    (root / "summary.json").write_text(__import__("json").dumps(summarize_bundle(root)))
    return root


def new_run(root: Path, source: Path, s: BundleSpec, extra: str = "") -> Bundle:
    """The new run's files, with source/ as ``UntilDecided.prepare`` writes it."""
    write_run(root, s, extra)
    b = Bundle(root, "test")
    UntilDecided(source).prepare(b)
    return b


def drop_cells_after(root: Path, repeat: int) -> list[str]:
    """Remove the cells of repeats after ``repeat`` (what a stopped run never ran); their ids."""
    gone = sorted(d.name for d in (root / "cells").iterdir() if int(d.name.rsplit("-r", 1)[1]) > repeat)
    for name in gone:
        shutil.rmtree(root / "cells" / name)
    return gone
