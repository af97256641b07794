"""Reading a bundle for its summary: the one module of ``kit.stats`` that touches files.

It reads ``plan.json``, ``manifest.yaml``, each cell's ``cell.json`` and, per level, ``records.jsonl``,
``client.json`` and the optional ``server_metrics.json``; everything else is computed by the pure modules.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from kit.errors import BundleError
from kit.files.bounds import max_record_bytes
from kit.files.read import refuse_links
from kit.files.records import steady_window
from kit.files.reproduce_looks import REPRODUCE_LOOKS_DIR
from kit.manifest import Manifest, load_manifest
from kit.plumbing.files import read_bounded
from kit.plumbing.jsontypes import TooDeep, loads
from kit.stats.ab import LevelSamples
from kit.stats.figures import cell_level_figures
from kit.stats.looks import LOOKS_DIR, LookDoc, LookInput, apply_looks, look_rel, mark_not_run, take_look
from kit.stats.requests import LevelRecords, RecordLike, reduce_records
from kit.stats.shapes import CellLevelFigures, SummaryDoc
from kit.stats.summary import CellInfo, LevelResult, cell_info, summarize_level, summary_doc
from kit.stats.telemetry import with_telemetry

MAX_JSON_BYTES = 64 << 20  # plan.json, cell.json, client.json, server_metrics.json: small files


def read_json(path: Path) -> Any:
    """A JSON file's value, None when the file is missing; BundleError when it cannot be read, is larger
    than MAX_JSON_BYTES (at most that + 1 byte is read) or nests deeper than Python's JSON parser allows."""
    try:
        return loads(read_bounded(path, MAX_JSON_BYTES).decode("utf-8"))
    except FileNotFoundError:
        return None
    except TooDeep:
        raise BundleError(f"{path}: JSON nested too deeply; refused") from None
    except (OSError, ValueError) as e:
        raise BundleError(f"{path}: cannot read: {e}") from None


class RecordStream:
    """The records of a ``records.jsonl``, one line at a time (memory bounded by ``max_line``, not the file);
    ``unparsable`` counts lines that are not JSON objects or are longer than ``max_line`` bytes (no request kit's
    driver records makes one: ``kit.files.bounds.max_record_bytes``), complete once iterated."""

    def __init__(self, path: Path, max_line: int | None = None) -> None:
        self.path = path
        self.max_line = max_line
        self.unparsable = 0

    def __iter__(self) -> Iterator[RecordLike]:
        limit = -1 if self.max_line is None else self.max_line + 1
        try:
            with open(self.path, "rb") as f:
                while raw := f.readline(limit):
                    if len(raw) == limit and not raw.endswith(b"\n"):  # longer than max_line: never parsed
                        self.unparsable += 1
                        while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                            pass
                        continue
                    rec = self._parse(raw)
                    if rec is not None:
                        yield rec
        except OSError as e:
            raise BundleError(f"{self.path}: cannot read: {e}") from None

    def _parse(self, raw: bytes) -> RecordLike | None:
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BundleError(f"{self.path}: not UTF-8 ({e})") from None
        if not line.strip():
            return None
        try:
            rec = loads(line)
        except ValueError:  # TooDeep too
            self.unparsable += 1
            return None
        if isinstance(rec, dict):
            return rec
        self.unparsable += 1
        return None


def read_records(path: Path, max_line: int | None = None) -> RecordStream | None:
    """The records of a ``records.jsonl`` as a stream (None: no file); lines over ``max_line`` bytes are skipped."""
    return RecordStream(path, max_line) if path.is_file() else None


def _cells(root: Path, plan: dict[str, Any], only: Collection[str] | None = None) -> list[CellInfo]:
    out: list[CellInfo] = []
    for c in plan.get("cells") or []:
        if only is None or str(c["id"]) in only:
            out.append(cell_info(c, read_json(root / "cells" / str(c["id"]) / "cell.json"), len(out)))
    return out


def _level_dir(root: Path, cell: CellInfo, level: int) -> Path:
    return root / "cells" / cell.id / f"level-{level}"


def _measure(d: Path, requested: int, most: int) -> tuple[LevelRecords, CellLevelFigures] | None:
    """One cell x level: reduced records and figures (None when it has no records.jsonl); ``requested``: the
    output tokens a request without its own max_tokens asked for; ``most``: the most any request may ask (the
    record lines' bound)."""
    stream = read_records(d / "records.jsonl", max_record_bytes(most))
    if stream is None:
        return None
    client = read_json(d / "client.json")
    workers = client.get("workers") if isinstance(client, dict) else None
    keep = steady_window(workers if isinstance(workers, list) else [])  # load.window steady: ramp, drain out
    try:
        lr = replace(reduce_records(filter(keep, stream), requested=requested), unparsable_lines=stream.unparsable)
    except (TypeError, ValueError, KeyError) as e:
        raise BundleError(f"{d / 'records.jsonl'}: malformed record ({type(e).__name__}: {e})") from None
    return lr, cell_level_figures(lr, client, read_json(d / "server_metrics.json"), requested)


def summarize_bundle(root: Path, *, legacy: bool = False) -> dict[str, Any]:
    """The whole summary of a bundle as a JSON document (what summary.json holds); see ``summary_of``."""
    return cast("dict[str, Any]", summary_of(Path(root), legacy=legacy))


def summary_of(root: Path, *, legacy: bool = False) -> SummaryDoc:
    """The whole summary of a bundle, recomputed from its raw records (JSON-serialisable, rounded); ``legacy``:
    with the analysis of summary schemas before 5 (``kit.stats.summary.analysis_rule``)."""
    m, cells, by_cell, levels = _read_levels(root)
    doc = summary_doc(m, [(c, by_cell[c.id]) for c in cells], levels, legacy=legacy)
    looks = [fresh for _, fresh in recompute_looks(root, m)] if m.design.sequential is not None else []
    if looks:  # else a fixed design, or a sequential run stopped before its first block ended: the cells so far
        doc = cast("SummaryDoc", apply_looks(m, doc, looks))
    elif m.design.sequential is None and (k := stopped_block(root, m)) is not None:
        mark_not_run(doc, 2 * k, f"kit reproduce --until-decided stopped at look {k}: its verdict was decided")
    return with_telemetry(doc, root)  # telemetry: descriptive, per cell level (kit.stats.telemetry)


def level_samples(root: Path) -> list[LevelSamples]:
    """Each level's per-arm cell samples, exactly as the summary's comparisons see them (``kit plan --pilot``)."""
    return [lv.samples for lv in _read_levels(Path(root))[3]]


def recorded_looks(root: Path, directory: str = LOOKS_DIR) -> list[LookDoc]:
    """The looks a sequential run recorded (looks/001.json, 002, ... up to the first one missing), or with
    ``directory`` reproduce-looks/, those of `kit reproduce --until-decided`."""
    out: list[LookDoc] = []
    while (root / look_rel(len(out) + 1, directory)).is_file():
        doc = read_json(root / look_rel(len(out) + 1, directory))
        if not isinstance(doc, dict) or doc.get("look") != len(out) + 1:
            raise BundleError(f"{root / look_rel(len(out) + 1, directory)}: not a look kit writes (its number must "
                              f"be {len(out) + 1})")
        out.append(doc)
    extra = sorted(p.name for p in (root / directory).glob("*")) if (root / directory).is_dir() else []
    if len(extra) != len(out):
        raise BundleError(f"{root / directory}: holds {', '.join(extra)}; kit numbers looks 001.json, 002, ... "
                          "without gaps")
    return out


def stopped_block(root: Path, m: Manifest) -> int | None:
    """The last block of a run its looks stopped (design.sequential's looks/, or `kit reproduce --until-decided`'s
    reproduce-looks/): the cells after it are not needed; None: no look stopped it."""
    looks = recorded_looks(root, LOOKS_DIR if m.design.sequential is not None else REPRODUCE_LOOKS_DIR)
    if not looks or looks[-1].get("stop") is None:
        return None
    return int(looks[-1]["look"])


def cells_summary(root: Path, cells: Collection[str]) -> SummaryDoc:
    """The summary of only these cells (no looks, no telemetry): the run as it stood at a look."""
    m, infos, by_cell, levels = _read_levels(root, cells)
    return summary_doc(m, [(c, by_cell[c.id]) for c in infos], levels)


def look_input(doc: LookDoc) -> LookInput:
    try:
        return LookInput(int(doc["look"]), tuple(str(c) for c in doc["cells"]), float(doc["elapsed_s"]))
    except (KeyError, TypeError, ValueError) as e:
        raise BundleError(f"look {doc.get('look')}: no readable look number, cells or elapsed_s ({e})") from None


def take_look_at(root: Path, m: Manifest, inp: LookInput, history: list[LookDoc]) -> LookDoc:
    """A look on the records of its cells (only those), after ``history``."""
    return take_look(m, [lv.samples for lv in _read_levels(root, inp.cells)[3]], inp, history)


def recompute_looks(root: Path, m: Manifest) -> list[tuple[LookDoc, LookDoc]]:
    """Every recorded look and the same look recomputed from the records of the cells it names (each after
    the recomputed looks before it): what ``kit verify`` compares and the summary's sequential verdicts use."""
    fresh: list[LookDoc] = []
    out = []
    for doc in recorded_looks(root):
        again = take_look_at(root, m, look_input(doc), fresh)
        fresh.append(again)
        out.append((doc, again))
    return out


def _read_levels(root: Path, only: Collection[str] | None = None) -> tuple[
        Manifest, list[CellInfo], dict[str, dict[str, CellLevelFigures]], list[LevelResult]]:
    refuse_links(root)  # every file below is read, the manifest and the records too: none through a link
    plan = read_json(root / "plan.json")
    if not isinstance(plan, dict):
        raise BundleError(f"{root}: no readable plan.json")
    m = load_manifest(root / "manifest.yaml", allow_unpinned=True).manifest
    arms = [a.name for a in m.arms]
    cells = _cells(root, plan, only)
    by_cell: dict[str, dict[str, CellLevelFigures]] = {c.id: {} for c in cells}
    levels: list[LevelResult] = []
    for lv in plan.get("levels") or []:
        planned = dict(lv)
        level = int(planned["concurrency"])
        measured = []
        for c in cells:
            got = _measure(_level_dir(root, c, level), m.load.output_tokens, m.load.most_max_tokens())
            if got is not None:
                by_cell[c.id][str(level)] = got[1]
                measured.append((c, got[0], got[1]))
        levels.append(summarize_level(planned, arms, m.analysis.confidence, measured))
    return m, cells, by_cell, levels
