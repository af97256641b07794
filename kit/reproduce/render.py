"""The words of a reproduction: the terminal's lines and ``reproduce.md``, both from a typed ``ReproduceFile``
(setup differences first, then what each arm ran, the load client, the verdicts, the A/B conclusion)."""

from __future__ import annotations

import json
from typing import Protocol

from kit.files.reproduce import ClientRow, Conclusion, ReproComparison, ReproduceFile, SetupRow, Verdict

VERDICT_WORD = {"reproduced": "REPRODUCED", "not_reproduced": "NOT REPRODUCED", "inconclusive": "INCONCLUSIVE"}
STATUS_WORD = {"reproduced": "reproduced", "not_reproduced": "NOT reproduced", "inconclusive": "inconclusive"}


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
    def confidence(self) -> float: ...
    @property
    def comparisons(self) -> list[ReproComparison]: ...
    @property
    def conclusions(self) -> list[Conclusion]: ...


def headline(r: Judged) -> str:
    """One line: the verdict, how many comparisons made it, and whether the A/B conclusion held."""
    n = len(r.comparisons)
    ok, bad, undecided = (r.counts.get(k, 0) for k in ("reproduced", "not_reproduced", "inconclusive"))
    what = f"comparisons of {r.primary}"
    margin = f"the ±{100 * r.margin:.3g} % margin"
    if r.verdict == "reproduced":
        text = f"all {n} {what} within {margin}"
    elif r.verdict == "not_reproduced":
        text = f"{bad} of {n} {what} beyond {margin} ({ok} reproduced, {undecided} inconclusive)"
    else:
        text = f"{undecided} of {n} {what} undecided at {margin} ({ok} reproduced)"
    return f"verdict: {VERDICT_WORD[r.verdict]}: {text}; {conclusion_text(r)}"


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
    out += ["", headline(r)]
    return out


def verdict_lines(r: Judged, what: str) -> list[str]:
    """Every comparison's line, then the A/B conclusion at each level (``what``: the title's first word)."""
    out = [f"{what} of {r.primary} (margin ±{100 * r.margin:.3g} %, "
           f"{100 * (1 - 2 * (1 - r.confidence)):.0f} % intervals; docs/reproduce.md):"]
    out += [f"  {STATUS_WORD[c.verdict]:<15} {c.text}" for c in r.comparisons]
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
    md += ["", f"## Verdicts: {r.primary}, margin ±{100 * r.margin:.3g} %", "",
           f"Each line compares the new run with the original: an arm's level (ratio new/original of the geometric "
           f"means of its cells' statistics) or an A/B effect (ratio of the two runs' arm/baseline ratios), with its "
           f"{100 * (1 - 2 * (1 - r.confidence)):.0f} % interval (TOST at α = {1 - r.confidence:.3g}). Method: "
           "docs/reproduce.md.", "", "| verdict | comparison | p (equivalent) | p (different) |", "|---|---|---:|---:|"]
    for c in r.comparisons:
        word = STATUS_WORD[c.verdict]
        md.append(f"| {'**' + word + '**' if c.verdict != 'reproduced' else word} | {c.text} | "
                  f"{_p(c.p_equivalent)} | {_p(c.p_different)} |")
    md += ["", "## A/B conclusion", ""]
    md += [f"- {c.text}" for c in r.conclusions] or ["- no non-baseline arm"]
    if r.notes:
        md += ["", "## Notes", ""] + [f"- {n}" for n in r.notes]
    return "\n".join(md) + "\n"


def _p(p: float | None) -> str:
    return "–" if p is None else f"{p:.3g}"
