"""The words of a reproduction: the terminal's lines and ``reproduce.md``, both from a typed ``ReproduceFile``
(setup differences first, then what each arm ran, the load client, the verdicts, the A/B conclusion)."""

from __future__ import annotations

import json
from typing import Protocol

from kit.files.reproduce import ClientRow, Conclusion, ReproComparison, ReproduceFile, SetupRow, Verdict

VERDICT_WORD = {"reproduced": "REPRODUCED", "inconsistent": "INCONSISTENT", "imprecise": "IMPRECISE",
                "not_reproduced": "NOT REPRODUCED", "inconclusive": "INCONCLUSIVE"}  # the last two: older kits
STATUS_WORD: dict[Verdict | None, str] = {
    "reproduced": "reproduced", "inconsistent": "INCONSISTENT", "imprecise": "imprecise", None: "shift",
    "not_reproduced": "NOT reproduced", "inconclusive": "inconclusive"}


def _value(v: object) -> str:
    if v is None:
        return "–"
    text = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)
    return text if len(text) <= 64 else text[:61] + "..."


def _setup_text(r: SetupRow) -> str:
    if r.same:
        return _value(r.original)
    text = f"{_value(r.original)} → {_value(r.new)}" if r.original != r.new else _value(r.original)
    return f"{text} ({r.note})" if r.note else text


def _client_text(r: ClientRow) -> str:
    share = "–" if r.cpu_share_max is None else f"{100 * r.cpu_share_max:.0f} %"
    lag = "–" if r.lag_p99_ms_max is None else f"{r.lag_p99_ms_max:.2g} ms"
    bound = ", ".join(r.client_bound_cells) or "none"
    return (f"{r.processes or '–'} process(es) on {r.usable_cores or '–'} cores, CPU share ≤{share}, "
            f"lag p99 ≤{lag}, client-bound cells: {bound}")


class Judged(Protocol):
    """What the verdict's words need: a ``ReproduceFile``, or `kit compare`'s equivalence of two bundles."""

    @property
    def verdict(self) -> Verdict: ...
    @property
    def counts(self) -> dict[str, int]: ...
    @property
    def primary(self) -> str: ...
    @property
    def margin(self) -> float: ...
    @property
    def effect_margin(self) -> float | None: ...
    @property
    def same_hardware(self) -> bool: ...
    @property
    def confidence(self) -> float: ...
    @property
    def comparisons(self) -> list[ReproComparison]: ...
    @property
    def conclusions(self) -> list[Conclusion]: ...


def margin_text(r: Judged) -> str:
    """The pre-registered margins in words."""
    absolute = f"±{100 * r.margin:.3g} %"
    if r.effect_margin is None:
        return f"margin {absolute}"
    arms = f"; arms {absolute} (same_hardware)" if r.same_hardware else ""
    return (f"margin {100 * r.effect_margin:.3g} % of each effect the original found, {absolute} where it found "
            f"none{arms}")


def headline(r: Judged) -> str:
    """One line: the verdict, how many judged comparisons made it, the arms' shifts, whether the conclusion held."""
    judged = [c for c in r.comparisons if c.judged]
    n = len(judged)
    ok, bad, undecided = (r.counts.get(k, 0) for k in ("reproduced", "inconsistent", "imprecise"))
    what = f"judged comparisons of {r.primary}"
    if r.verdict == "reproduced":
        text = f"all {n} {what} within the margin"
    elif r.verdict == "inconsistent":
        text = (f"{bad} of {n} {what} outside the original's prediction interval ({ok} reproduced, {undecided} "
                "imprecise)")
    else:
        text = f"{undecided} of {n} {what} neither inconsistent nor within the margin ({ok} reproduced)"
    return f"verdict: {VERDICT_WORD[r.verdict]}: {text}; {shift_text(r)}{conclusion_text(r)}"


def shift_text(r: Judged) -> str:
    """The arms' absolute shifts between the runs, when they are facts (not judged)."""
    ratios = [c.ratio for c in r.comparisons if c.kind == "arm" and not c.judged and c.ratio is not None]
    if not ratios:
        return ""
    return f"arms moved ×{min(ratios):.3f} to ×{max(ratios):.3f} between the machines (not judged); "


def conclusion_text(r: Judged) -> str:
    """Whether the A/B conclusion held, at how many of the levels that could be judged."""
    n = len(r.conclusions)
    judged = [c for c in r.conclusions if c.held is not None]
    if not judged:
        return "the A/B conclusion was not judged (withheld in a run)" if n else "no A/B comparison"
    held = sum(1 for c in judged if c.held)
    word = "held" if held == len(judged) else "DID NOT HOLD"
    skipped = f", {n - len(judged)} not judged" if len(judged) < n else ""
    return f"the A/B conclusion {word} ({held} of {len(judged)} judged level(s) held{skipped})"


def lines(r: ReproduceFile) -> list[str]:
    """What `kit reproduce` prints after the run."""
    src = r.source
    out = [f"source: {src.path} (run {src.run_id} of {src.experiment}; provenance sha256 "
           f"{src.provenance_sha256[:16]}...)", f"  {src.signer}", "", "setup (original → new):"]
    differ = [s for s in r.setup if not s.same]
    out += [f"  DIFFERS  {s.what}: {_setup_text(s)}" for s in differ] or ["  no recorded difference"]
    same = [s.what for s in r.setup if s.same]
    if same:
        out.append(f"  same:    {', '.join(same)}")
    out.append("what each arm ran:")
    for i in r.images:
        out.append(f"  {i.status:<12} {i.arm}: {_value(i.new if i.status == 'identical' else i.original)}")
        out += [f"               {d}" for d in i.differences]
    out.append("load client (worst cell per level):")
    out += [f"  c={c.level:<5} {c.run:<8} {_client_text(c)}" for c in r.client]
    out += ["", *verdict_lines(r, "reproduction")]
    out += [f"note: {n}" for n in r.notes]
    out += ["", *([until_text(r)] if r.until_decided else []), headline(r)]
    return out


def until_text(r: ReproduceFile) -> str:
    """Where an --until-decided reproduction stopped, and why."""
    u = r.until_decided
    if u is None:
        return ""
    return f"until decided: {u.stopped} ({u.cells_used} of {u.cells_planned} planned cells of the new run used)"


def verdict_lines(r: Judged, what: str) -> list[str]:
    """Every comparison's line, then the A/B conclusion at each level (``what``: the title's first word)."""
    out = [f"{what} of {r.primary} ({margin_text(r)}; each figure the geometric mean over a run's cells, where "
           "report.md's tables show their plain mean; docs/reproduce.md):"]
    out += [f"  {STATUS_WORD.get(c.verdict, str(c.verdict)):<13} {c.text}" for c in r.comparisons]
    out.append(f"A/B conclusion ({r.primary}, each arm vs the baseline):")
    return out + ([f"  {c.text}" for c in r.conclusions] or ["  no non-baseline arm"])


def markdown(r: ReproduceFile, bundle: str) -> str:
    """reproduce.md: the same, as a document inside the new bundle."""
    src = r.source
    md = [f"# Reproduction of {src.experiment} (run {src.run_id})", "",
          f"**{headline(r)}**", "",
          f"- source: `{src.path}` ({src.kind}, top folder `{src.top}`), provenance sha256 `{src.provenance_sha256}`"
          + (f", archive sha256 `{src.archive_sha256}`" if src.archive_sha256 else ""),
          f"- source signer: {src.signer}",
          f"- this bundle: `{bundle}`; the source's signed provenance and the files the verdict was drawn from are "
          "in `source/`", "",
          *([f"**{until_text(r)}**; each look: `reproduce-looks/` (docs/reproduce.md, \"Stopping once the verdict is "
              "decided\")", ""] if r.until_decided else []),
          "## Setup: original and new", "", "| what | original | new | |", "|---|---|---|---|"]
    for s in sorted(r.setup, key=lambda s: s.same):
        mark = "same" if s.same else f"**differs**{': ' + s.note if s.note else ''}"
        md.append(f"| {s.what} | {_value(s.original)} | {_value(s.new)} | {mark} |")
    md += ["", "## What each arm ran", "", "| arm | identity | original | new | differences |", "|---|---|---|---|---|"]
    for i in r.images:
        md.append(f"| {i.arm} | {i.status} | `{i.original or '–'}` | `{i.new or '–'}` | "
                  f"{'; '.join(i.differences) or '–'} |")
    md += ["", "## Load client (worst cell per level)", "", "| level | run | client |", "|---:|---|---|"]
    md += [f"| {c.level} | {c.run} | {_client_text(c)} |" for c in r.client]
    md += ["", f"## Verdicts: {r.primary}, {margin_text(r)}", "",
           "Each line compares the new run with the original: an A/B effect (ratio of the two runs' arm/baseline "
           "ratios; inconsistent when the Holm-adjusted test of no difference rejects, reproduced when TOST within "
           f"the margin passes at α = {1 - r.confidence:.3g} and the direction held) or an arm's shift (ratio "
           "new/original of the geometric means of its cells' statistics: a fact about the machines unless "
           "same_hardware). Method: docs/reproduce.md.", "",
           "| verdict | comparison | p (no difference, Holm) | p (equivalent) |", "|---|---|---:|---:|"]
    for c in r.comparisons:
        word = STATUS_WORD.get(c.verdict, str(c.verdict))
        md.append(f"| {'**' + word + '**' if c.verdict not in ('reproduced', None) else word} | {c.text} | "
                  f"{_p(c.p_zero_adjusted)} | {_p(c.p_equivalent)} |")
    md += ["", "## A/B conclusion", ""]
    md += [f"- {c.text}" for c in r.conclusions] or ["- no non-baseline arm"]
    if r.notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    return "\n".join(md) + "\n"


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"
