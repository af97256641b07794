"""`kit reproduce --until-decided`: an interim look at the reproduce verdict after each block of the new run
(``reproduce-looks/<k>.json``), taken from files of the new bundle only (``source/summary.json``, copied there
before the start checkpoint, and the records of the cells the look names), so that ``kit verify`` recomputes every
look exactly as the run took it. The rule: ``kit.reproduce.sequential``; the method: docs/reproduce.md.

``UntilDecided`` is the stop rule ``kit.experiment`` runs (``RunOptions.stop_rule``): the loop knows only its
interface (kit.experiment.stoprule)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kit.bundle import Bundle
from kit.bundle.looks import look_difference
from kit.errors import BundleError, KitError
from kit.experiment.looks import block_done
from kit.files.read import read_file
from kit.files.reproduce import CellCounts, ReproComparison
from kit.files.reproduce_looks import REPRODUCE_LOOKS_DIR, ReproduceLookFile, reproduce_look_rel
from kit.files.summary import Summary
from kit.manifest import Manifest, load_manifest
from kit.plan import Plan
from kit.plumbing.jsontypes import loads
from kit.reproduce.decide import EffectCells, Rule, effect_contrasts
from kit.reproduce.equivalence import logs
from kit.reproduce.sealing import SOURCE_DIR, copy_source
from kit.reproduce.sequential import SPENDING, LookStat, Past, SeqDecision, decide_look, stop_of
from kit.reproduce.verdict import WITHHELD, Judge, judge
from kit.stats.bundle import cells_summary, recorded_looks
from kit.stats.looks import blocks
from kit.stats.numbers import clean

FLAG = "until_decided"
LookDoc = dict[str, Any]  # what reproduce-looks/<k>.json holds (typed: kit.files.reproduce_looks.ReproduceLookFile)


def rule_of(m: Manifest) -> Rule:
    return Rule.of(m.analysis, even=m.design.order == "abba")


def _stat(j: Judge, c: ReproComparison, most: int) -> tuple[LookStat, float | None, float | None]:
    """One effect at the look: the same cells and contrasts as the fixed rule (``Judge.effect``), and D's parts."""
    base = j.baseline
    groups = {(r, a): j.cells(run, a, c.level) for r, run in (("original", j.original), ("new", j.new))
              for a in (c.arm, base)}
    oa, ob, na, nb = (logs(groups[r, a].values) for r in ("original", "new") for a in (c.arm, base))
    ob_, nb_ = ((groups[r, c.arm].blocks(), groups[r, base].blocks()) if j.blocked else None
                for r in ("original", "new"))
    parts = effect_contrasts(EffectCells(oa, ob, na, nb, False, ob_, nb_))
    withheld = c.status in WITHHELD
    if parts is None:
        return LookStat(None, math.inf, 2 / most, None, None, math.nan, math.nan, j.rule.delta(None), None, True), \
            None, None
    co, cn, d = parts
    claimed = co.estimate if c.margin_basis == "effect" else None
    se_max = math.sqrt(sum(v / most for v, _ in cn.groups))  # each group's variance over its planned cells
    return LookStat(d, sum(1 / n for _, n in cn.groups), 2 / most, cn.df, co.df, co.se, se_max,
                    j.rule.delta(claimed), claimed, withheld), co.se, cn.se


def _past(c: dict[str, Any]) -> Past:
    def p(key: str) -> float:
        v = c.get(key)
        return float(v) if c["tested"] and v is not None else 1.0
    return Past(float(c["fraction"]), p("p_zero"), p("p_lower"), p("p_upper"), c.get("direction_held"),
                bool(c["tested"]))


def take_reproduce_look(root: Path, m: Manifest, look: int, cells: Sequence[str],
                        history: Sequence[LookDoc]) -> LookDoc:
    """Look ``look`` of the new bundle at ``root`` on the records of ``cells`` (its ok cells of blocks 1..look),
    after the looks ``history`` (as recorded or recomputed)."""
    src = read_file(root, f"{SOURCE_DIR}/summary.json", Summary)
    new = Summary.model_validate(cells_summary(root, cells))
    rule = rule_of(m)
    comps = [c for c in judge(src, new, rule)[0] if c.kind == "effect"]
    j = Judge(src, new, rule)
    final = look >= blocks(m)
    stats = [_stat(j, c, m.design.repeats) for c in comps]
    hist = [[_past(next(x for x in h["comparisons"] if x["arm"] == c.arm and x["level"] == c.level))
             for h in history] for c in comps]
    decisions = decide_look(hist, [s for s, _, _ in stats], rule.alpha, final=final)
    stop, verdict, why = stop_of([d.verdict for d in decisions], final)
    out = [_comparison(c, s, so, sn, d) for c, (s, so, sn), d in zip(comps, stats, decisions, strict=True)]
    notes = [f"{c['arm']} c={c['level']}: the maximum ({m.design.repeats} repeats per arm) cannot show "
             "equivalence even if nothing changed (D's SD at the maximum, the original's share included, is too "
             "large for the margin); non-binding, the run goes on" for c in out if c["reachable"] is False]
    doc = {"look": look, "of": blocks(m), "cells": list(cells), "spending": SPENDING, "alpha": rule.alpha,
           "final": final, "comparisons": out, "stop": stop, "verdict": verdict, "why": why, "notes": notes}
    cleaned = clean(doc)
    assert isinstance(cleaned, dict)
    return cleaned


def _comparison(c: ReproComparison, s: LookStat, se_o: float | None, se_n: float | None,
                d: SeqDecision) -> dict[str, object]:
    ci = None if d.repeated_ci is None else [math.exp(d.repeated_ci[0]), math.exp(d.repeated_ci[1])]
    return {"arm": c.arm, "baseline": c.baseline or "", "level": c.level,
            "status": c.status if c.status in WITHHELD else "ok",
            "cells": CellCounts(original=c.cells.original, new=c.cells.new).model_dump(),
            "claimed": s.claimed is not None, "delta": s.delta,
            "log_estimate": None if s.d is None else s.d.estimate, "log_se": None if s.d is None else s.d.se,
            "df": None if s.d is None else s.d.df, "df_new": s.df_new, "df_original": s.df_original,
            "df_test": d.df, "se_original": se_o, "se_new": se_n,
            "se_new_max": None if s.d is None else s.se_new_max, "fraction": d.fraction, "tested": d.tested,
            "p_zero": d.p_zero, "p_lower": d.p_lower, "p_upper": d.p_upper, "family_alpha": d.family_alpha,
            "nominal_zero": d.nominal_zero, "nominal_tost": d.nominal_tost,
            "zero_rejected_at_look": d.zero_rejected_at, "lower_rejected_at_look": d.lower_rejected_at,
            "upper_rejected_at_look": d.upper_rejected_at, "direction_held": d.direction_held,
            "repeated_ci": ci, "reachable": d.reachable, "decision": d.verdict, "decided_at_look": d.decided_at}


def look_line(doc: LookDoc) -> str:
    """'reproduce look 2 of 6 (8 cells): oea c=1 reproduced (new/original ×0.98 [×0.90, ×1.07]); stop: ...'."""
    parts = []
    for c in doc["comparisons"]:
        ci = c.get("repeated_ci")
        est = c.get("log_estimate")
        fig = "" if est is None else f"new/original ×{math.exp(est):.3f}" + (
            f" [×{ci[0]:.3f}, ×{ci[1]:.3f}]" if ci else "")
        parts.append(f"{c['arm']} c={c['level']} {c['decision']}" + (f" ({fig})" if fig else ""))
    stop = f"; stop: {stopped_text(doc)}" if doc.get("stop") else ""
    return f"reproduce look {doc['look']} of {doc['of']} ({len(doc['cells'])} cells): {', '.join(parts)}{stop}"


def stopped_text(doc: LookDoc | None) -> str:
    """'decided at look 2 of 6: every judged effect reproduced'."""
    if doc is None:
        return "no look yet (the run ended before its first block)"
    if doc.get("stop") == "decided":
        return f"decided at look {doc['look']} of {doc['of']}: {doc['why']}"
    if doc.get("stop") == "max_repeats":
        return f"the maximum: look {doc['look']} of {doc['of']} was the last block the plan allows ({doc['why']})"
    return f"not finished: look {doc['look']} of {doc['of']} decided nothing final ({doc['why']})"


class ReproduceLooks:
    """The looks of one reproduction, as recorded in its bundle (the loop's ``Stopper``)."""

    def __init__(self, m: Manifest, plan: Plan, bundle: Bundle) -> None:
        self.m, self.plan, self.bundle = m, plan, bundle
        self.done: list[LookDoc] = recorded_looks(bundle.root, REPRODUCE_LOOKS_DIR)

    @property
    def stopped(self) -> bool:
        return bool(self.done) and self.done[-1].get("stop") is not None

    def take_due(self) -> list[str]:
        lines = []
        while not self.stopped and len(self.done) < blocks(self.m):
            k = len(self.done) + 1
            got = block_done(self.plan, self.bundle, k)
            if got is None:
                break
            doc = take_reproduce_look(self.bundle.root, self.m, k, got[0], self.done)
            self.bundle.write_json(reproduce_look_rel(k), ReproduceLookFile.model_validate(doc))
            self.done.append(doc)
            lines.append(look_line(doc))
        return lines


class UntilDecided:
    """The stop rule of `kit reproduce --until-decided` (kit.experiment.stoprule.StopRule): the source's files the
    looks read are copied into the new bundle before its start checkpoint; a look after each block."""

    flag = FLAG

    def __init__(self, source_root: Path) -> None:
        self.source_root = source_root  # the verified private copy of the source

    def prepare(self, bundle: Bundle) -> None:
        copy_source(self.source_root, bundle)

    def start(self, m: Manifest, plan: Plan, bundle: Bundle) -> ReproduceLooks:
        return ReproduceLooks(m, plan, bundle)


def recompute_looks(root: Path) -> list[tuple[LookDoc, LookDoc]]:
    """Every recorded look and the same look recomputed from source/summary.json and the records of the cells it
    names (each after the recomputed looks before it)."""
    m = load_manifest(root / "manifest.yaml", allow_unpinned=True).manifest
    fresh: list[LookDoc] = []
    out = []
    for doc in recorded_looks(root, REPRODUCE_LOOKS_DIR):
        try:
            look, cells = int(doc["look"]), [str(c) for c in doc["cells"]]
        except (KeyError, TypeError, ValueError) as e:
            raise BundleError(f"reproduce look {doc.get('look')}: no readable look number or cells ({e})") from None
        again = take_reproduce_look(root, m, look, cells, fresh)
        fresh.append(again)
        out.append((doc, again))
    return out


def check_reproduce_looks(root: Path) -> tuple[str | None, list[str]]:
    """`kit verify`'s check (kit.bundle.verify's ``checks``): every reproduce look recomputed and compared field by
    field; (the note, problems), (None, []) for a bundle without reproduce looks."""
    if not (root / REPRODUCE_LOOKS_DIR).exists():
        return None, []
    try:
        pairs = recompute_looks(root)
    except KitError as e:
        return None, [f"{REPRODUCE_LOOKS_DIR}: cannot recompute them ({e.message})"]
    problems = []
    for recorded, fresh in pairs:
        where = look_difference(loads(json.dumps(recorded)), loads(json.dumps(fresh)))
        if where is not None:
            problems.append(f"{reproduce_look_rel(int(recorded['look']))}: differs from the look recomputed from "
                            f"source/summary.json and the records at {where}")
    last = pairs[-1][1] if pairs else None
    stop = f"; {stopped_text(last)}" if last and last.get("stop") else ""
    return f"{len(pairs)} reproduce look(s) recomputed from source/summary.json and the records OK{stop}", problems
