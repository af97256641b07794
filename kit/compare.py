"""`kit compare A B`: what differs between two bundles' setups, and how their figures moved (B / A).

This compares *runs* (the same experiment on two machines, two days, two kit versions); the A/B
verdicts between *arms* inside one run are in each bundle's report. Figures come from each
bundle's summary.json (read as a typed ``Summary``), which `kit verify` recomputes from the records.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from pydantic import BaseModel

from kit.bundle import extracted, is_archive
from kit.bundle.verify import signed_statement
from kit.errors import BundleError, Imprecise, Inconsistent, KitError
from kit.files.read import MAX_FILE_BYTES, read_file, refuse_links
from kit.files.reproduce import Conclusion, ReproComparison, Verdict
from kit.files.summary import ArmLevel, Summary
from kit.manifest import load_manifest
from kit.manifest.analysis import Analysis
from kit.manifest.models import Manifest
from kit.plumbing.files import read_bounded
from kit.plumbing.jsontypes import TooDeep, loads
from kit.reproduce.decide import Rule
from kit.reproduce.render import headline, margin_text, verdict_lines
from kit.reproduce.setup import setup_rows
from kit.reproduce.verdict import counts, judge, overall

FigureGet = Callable[[ArmLevel], float | None]

FIGURES: list[tuple[str, FigureGet, bool]] = [  # (label, figure of an arm_levels entry, higher is better)
    ("out tok/s", lambda f: f.throughput_tok_s, True),
    ("req/s", lambda f: f.throughput_req_s, True),
    ("TTFT p50 ms", lambda f: f.ttft_ms.p50, False),
    ("TPOT p50 ms", lambda f: f.tpot_ms.p50, False),
    ("ITL p50 ms", lambda f: f.itl_ms.p50, False),
    ("E2E p50 ms", lambda f: f.e2e_ms.p50, False),
    ("experts/step", lambda f: f.server.unique_experts_per_step if f.server else None, False),
]
DEFAULT_ANALYSIS = Analysis()


class SetupRow(TypedDict):
    what: str
    a: object
    b: object
    same: bool
    note: str


class FigureRow(TypedDict):
    arm: str
    level: int
    figure: str
    a: float | None
    b: float | None
    ratio_b_over_a: float | None
    higher_is_better: bool
    client_bound: bool


class Equivalence(BaseModel):
    """`kit reproduce`'s verdict with A as the original and B as the new run (kit.reproduce.verdict.judge)."""

    primary: str
    margin: float  # the absolute margin (analysis.reproduce_margin, or --absolute-margin)
    effect_margin: float  # the fraction of each effect A found (analysis.reproduce.margin, or --margin)
    same_hardware: bool  # A's analysis.reproduce.same_hardware: the arms' shifts are judged
    margin_from: str  # "--margin", or where the default came from
    confidence: float
    verdict: Verdict
    counts: dict[str, int]
    comparisons: list[ReproComparison]
    conclusion_held: bool | None
    conclusions: list[Conclusion]
    notes: list[str]


class BundleComparison(TypedDict):
    a: str
    b: str
    setup: list[SetupRow]
    figures: list[FigureRow]
    equivalence: Equivalence


def _load(root: Path, name: str) -> object:
    p = root / name
    if not p.exists():  # a link is not missing: compare_bundles refused any before this runs
        return None
    try:
        return loads(read_bounded(p, MAX_FILE_BYTES, follow=False))
    except TooDeep:
        raise BundleError(f"{p}: JSON nested too deeply", hint=f"run `kit verify {root}`") from None
    except (OSError, ValueError) as e:  # not JSON, not UTF-8, too large, a directory or special file
        raise BundleError(f"{p}: not a readable JSON file ({e})", hint=f"run `kit verify {root}`") from None


def _trust_claim(doc: object) -> object:
    trust = doc.get("trust") if isinstance(doc, dict) else None
    return trust.get("signers") if isinstance(trust, dict) else None


def _setup(a: Path, b: Path) -> list[SetupRow]:
    """kit reproduce's setup diff (kit.reproduce.setup), plus run.json's trust claim and images.json; every JSON file
    it reads is first read here under the bundle read policy, so an odd one is exit 9, not a silent blank."""
    docs = [{name: _load(root, name) for name in ("run.json", "environment.json", "images.json")} for root in (a, b)]
    rows: list[SetupRow] = [{"what": r.what, "a": r.original, "b": r.new, "same": r.same, "note": r.note}
                            for r in setup_rows(a, b)]
    extra = [("trust unverified", _trust_claim(docs[0]["run.json"]), _trust_claim(docs[1]["run.json"])),  # a claim
             ("images", docs[0]["images.json"], docs[1]["images.json"])]
    return rows + [{"what": w, "a": x, "b": y, "same": x == y, "note": ""} for w, x, y in extra]


def _figures(summary: Summary) -> dict[tuple[str, int], ArmLevel]:
    return {(entry.arm, entry.level): entry for entry in summary.arm_levels}


def _ratio(x: float | None, y: float | None) -> float | None:
    return y / x if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x else None


def _manifest(root: Path) -> Manifest | None:
    p = root / "manifest.yaml"
    if not p.exists():
        return None
    try:
        return load_manifest(p, allow_unpinned=True).manifest
    except KitError as e:
        raise BundleError(f"{p}: not a kit manifest ({e.message})", hint=f"run `kit verify {root}`") from None


def equivalence(a: Path, sa: Summary, sb: Summary, margin: float | None, absolute_margin: float | None = None,
                ) -> Equivalence:
    """B judged against A as `kit reproduce` judges a re-run against its source, under A's manifest's rule
    (analysis.reproduce, analysis.reproduce_margin; kit's defaults when A has no manifest.yaml); ``margin`` and
    ``absolute_margin`` override the effect margin and the absolute one."""
    m = _manifest(a)
    analysis = m.analysis if m is not None else DEFAULT_ANALYSIS
    rule = Rule.of(analysis, even=m is not None and m.design.order == "abba", effect_margin=margin,
                   absolute_margin=absolute_margin)
    given = [flag for flag, v in (("--margin", margin), ("--absolute-margin", absolute_margin)) if v is not None]
    where = "A's manifest (analysis.reproduce)" if m is not None else "kit's defaults (A has no manifest.yaml)"
    if given:
        where = f"{' and '.join(given)}, else {where}"
    comps, concl = judge(sa, sb, rule, same_hardware=analysis.reproduce.same_hardware)
    held = [c.held for c in concl if c.held is not None]
    notes = [f"B's primary metric is {sb.analysis.primary}; A's ({sa.analysis.primary}) is compared"] \
        if sb.analysis.primary != sa.analysis.primary else []
    return Equivalence(primary=sa.analysis.primary, margin=rule.absolute_margin, effect_margin=rule.effect_margin,
                       same_hardware=analysis.reproduce.same_hardware, margin_from=where,
                       confidence=sa.analysis.confidence, verdict=overall(comps), counts=counts(comps),
                       comparisons=comps, conclusion_held=all(held) if held else None, conclusions=concl, notes=notes)


def compare_paths(a: Path, b: Path, margin: float | None = None, absolute_margin: float | None = None,
                  ) -> BundleComparison:
    """``compare_bundles`` of two bundle directories or `kit archive` files (known by their bytes), each archive
    extracted into a temp directory for the comparison as `kit verify --integrity-only` does (its signed provenance
    first, then only the members it signs, each no larger than signed); the result names the paths as given."""
    with contextlib.ExitStack() as stack:
        roots = [stack.enter_context(extracted(p, signed_statement(str(p)))) if not p.is_dir() and is_archive(p)
                 else p for p in (a, b)]
        result = compare_bundles(roots[0], roots[1], margin, absolute_margin)
    return {**result, "a": str(a), "b": str(b)}


def compare_bundles(a: Path, b: Path, margin: float | None = None, absolute_margin: float | None = None,
                    ) -> BundleComparison:
    for root in (a, b):
        if not (root / "run.json").exists():
            raise BundleError(f"{root} is not a kit bundle (no run.json)")
        if not (root / "summary.json").exists():
            raise BundleError(f"{root} has no summary.json", hint=f"run `kit report {root}`")
        refuse_links(root)  # neither bundle is verified here: nothing is read through a link out of it
    setup = _setup(a, b)
    sa, sb = read_file(a, "summary.json", Summary), read_file(b, "summary.json", Summary)
    fa, fb = _figures(sa), _figures(sb)
    rows: list[FigureRow] = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key), fb.get(key)
        for label, get, higher in FIGURES:
            x = get(va) if va else None
            y = get(vb) if vb else None
            if x is None and y is None:
                continue
            rows.append({
                "arm": key[0], "level": key[1], "figure": label, "a": x, "b": y, "ratio_b_over_a": _ratio(x, y),
                "higher_is_better": higher,
                "client_bound": bool((va is not None and va.client_bound) or (vb is not None and vb.client_bound)),
            })
    return {"a": str(a), "b": str(b), "setup": setup, "figures": rows,
            "equivalence": equivalence(a, sa, sb, margin, absolute_margin)}


def comparison_json(result: BundleComparison) -> dict[str, object]:
    """What `kit compare --json` prints."""
    return {**result, "equivalence": result["equivalence"].model_dump(mode="json")}


def raise_for_verdict(result: BundleComparison) -> None:
    """`kit compare --strict`: exit 10 (inconsistent) or 11 (imprecise), as `kit reproduce`; else nothing."""
    eq = result["equivalence"]
    if eq.verdict != "reproduced":
        error = Inconsistent if eq.verdict == "inconsistent" else Imprecise
        raise error(f"B against A: {headline(eq)}",
                    hint="each comparison's line (or --json's equivalence) says which level and arm, and by how much")


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    text = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)
    return text if len(text) <= 60 else text[:57] + "..."


def render_comparison(result: BundleComparison) -> list[str]:
    lines = [f"A: {result['a']}", f"B: {result['b']}",
             "NOT VERIFIED: kit compare reads what each bundle's files claim (trust included) and checks no "
             "signature; run `kit verify` on each bundle first", "", "setup:"]
    width = max((len(s["what"]) for s in result["setup"]), default=0)
    for s in result["setup"]:
        mark = "same" if s["same"] else "DIFFERS"
        text = _fmt(s["a"]) if s["same"] else f"A={_fmt(s['a'])}  B={_fmt(s['b'])}"
        lines.append(f"  {s['what']:<{width}} {mark:<8} {text}" + (f" ({s['note']})" if s["note"] else ""))
    lines += ["", f"{'arm':<12}{'c':>6}  {'figure':<14}{'A':>12}{'B':>12}{'B/A':>9}"]
    for r in result["figures"]:
        ratio = f"{r['ratio_b_over_a']:.3f}" if r["ratio_b_over_a"] is not None else "-"
        flag = "  client-bound" if r["client_bound"] else ""
        lines.append(f"{r['arm']:<12}{r['level']:>6}  {r['figure']:<14}{_fmt(r['a']):>12}{_fmt(r['b']):>12}"
                     f"{ratio:>9}{flag}")
    eq = result["equivalence"]
    lines += ["", "B/A above is a plain ratio of the two runs' pooled figures, without a confidence interval. Below, "
              "B is judged against A as `kit reproduce` judges a re-run against its source (A the original, B the "
              "new run; docs/reproduce.md).", f"{margin_text(eq)}, from {eq.margin_from}", ""]
    lines += verdict_lines(eq, "equivalence")
    lines += [f"note: {n}" for n in eq.notes] + ["", headline(eq)]
    return lines
