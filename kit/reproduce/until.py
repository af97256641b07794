"""`kit reproduce --until-decided` around the run: which sources it can reproduce so (refused otherwise, exit 2,
saying why), and the verdict of the sealed reproduction taken from its last look (``reproduce-looks/``) instead of
the fixed-sample rule. The looks themselves: ``kit.reproduce.looks``; the method: docs/reproduce.md."""

from __future__ import annotations

import math
from collections.abc import Sequence

from kit.errors import UsageError
from kit.files.reproduce import Interval, ReproComparison, UntilDecided, Verdict
from kit.manifest import Manifest
from kit.reproduce.looks import LookDoc, stopped_text
from kit.reproduce.sequential import SPENDING
from kit.reproduce.verdict import LABEL
from kit.stats.looks import blocks

FLAG_TEXT = "--until-decided"


def _r(x: object) -> str:
    if not isinstance(x, float | int):
        return "–"
    return f"×{x:.3f}" if 0.01 <= x < 10 else f"×{x:.3g}"


def refuse_unless_possible(m: Manifest) -> None:
    """A source whose reproduction cannot stop on its verdict: exit 2 naming the flag and why."""
    if m.design.sequential is not None:
        raise UsageError(f"{FLAG_TEXT}: the source's manifest has its own design.sequential, so its reproduction "
                         "stops on its own A/B looks (docs/reproduce.md, \"Sequential originals\"); and its original "
                         "stopped where its data chose, so its effect is not the fixed estimate the looks at D "
                         "assume. The two stop rules are not combined",
                         hint="reproduce it without --until-decided")
    if m.analysis.reproduce.same_hardware:
        raise UsageError(f"{FLAG_TEXT}: the manifest pre-registers analysis.reproduce.same_hardware, whose "
                         "failure-rate tests (Fisher's) have no group-sequential form here",
                         hint="reproduce it without --until-decided")
    if m.design.order not in ("abba", "counterbalanced", "interleaved") or m.design.repeats % 2 or \
            m.design.repeats < 4:
        raise UsageError(f"{FLAG_TEXT} looks after each block of two repeats per arm: it needs design.order abba, "
                         "counterbalanced or interleaved and an even design.repeats of at least 4 (this manifest: "
                         f"order {m.design.order}, repeats {m.design.repeats})",
                         hint="reproduce it without --until-decided")


def _decision_look(c: ReproComparison, looks: Sequence[LookDoc]) -> tuple[LookDoc, dict[str, object]] | None:
    """The look that decided this effect (else the last one), and the effect there."""
    def at(doc: LookDoc) -> dict[str, object] | None:
        return next((x for x in doc["comparisons"] if x["arm"] == c.arm and x["level"] == c.level), None)
    last = looks[-1]
    here = at(last)
    if here is None:
        return None
    k = here.get("decided_at_look")
    if isinstance(k, int) and 1 <= k <= len(looks) and (there := at(looks[k - 1])) is not None:
        return looks[k - 1], there
    return last, here


def _text(c: ReproComparison, doc: LookDoc, x: dict[str, object], verdict: str, last: LookDoc) -> str:
    label = LABEL.get(c.metric, c.metric)
    what = f"{c.arm} vs {c.baseline} c={c.level}: {label} effect {_r(c.original)} originally, {_r(c.new)} now"
    est, ci = x.get("log_estimate"), x.get("repeated_ci")
    if isinstance(est, float | int):
        what += f"; new/original {_r(math.exp(est))}"
        if isinstance(ci, list):
            what += f" [{_r(ci[0])}, {_r(ci[1])}] (repeated {100 * (1 - 2 * float(doc['alpha'])):.0f} % interval)"
    margin = f"margin [{_r(math.exp(-float(x['delta'])))}, {_r(math.exp(float(x['delta'])))}]"  # type: ignore[arg-type]
    k, most = doc["look"], doc["of"]
    if verdict == "reproduced":
        way = ", direction held" if x.get("direction_held") else ""
        return f"{what} within the {margin}{way}: reproduced at look {k} of {most}"
    if verdict == "inconsistent":
        return (f"{what}: no difference rejected at look {k} of {most} (p={x.get('p_zero'):.2g} against its "
                f"boundary {x.get('nominal_zero'):.2g}): INCONSISTENT")
    why = "undecided when another effect's inconsistency stopped the run" if last.get("stop") == "decided" else \
        f"not decided by the last look ({k} of {most})"
    return f"{c.text} [sequential: {why}]"


def apply_looks(comps: list[ReproComparison], looks: Sequence[LookDoc]) -> list[ReproComparison]:
    """Each A/B effect's verdict, figures and line as its deciding look (else the last) has them; the arms' shifts
    and withheld comparisons keep the fixed rule's figures and words."""
    if not looks:
        return comps
    out = []
    for c in comps:
        found = _decision_look(c, looks) if c.kind == "effect" else None
        if found is None:
            out.append(c)
            continue
        doc, x = found
        verdict = str(x["decision"])
        v: Verdict = verdict if verdict in ("reproduced", "inconsistent") else "imprecise"  # type: ignore[assignment]
        status = v if x.get("status") == "ok" else str(x["status"])
        est, ci = x.get("log_estimate"), x.get("repeated_ci")
        lo, hi = (x.get("p_lower"), x.get("p_upper"))
        update: dict[str, object] = {
            "verdict": v, "status": status, "text": _text(c, doc, x, verdict, looks[-1]),
            "p_zero_adjusted": None, "repeats_needed": c.repeats_needed if v == "imprecise" else None}
        if status == v and isinstance(est, float | int) and v != "imprecise":
            update.update(ratio=math.exp(est), log_estimate=est, log_se=x.get("log_se"), df=x.get("df"),
                          p_zero=x.get("p_zero"),
                          p_equivalent=max(lo, hi) if isinstance(lo, float) and isinstance(hi, float) else None,
                          ratio_ci=Interval(low=ci[0], high=ci[1]) if isinstance(ci, list) else None)
        out.append(c.model_copy(update=update))
    return out


def section(looks: Sequence[LookDoc], m: Manifest, cells_planned: int) -> UntilDecided:
    last = looks[-1] if looks else None
    return UntilDecided(looks=len(looks), most_looks=blocks(m), stop=last.get("stop") if last else None,
                        stopped=stopped_text(last), cells_used=len(last["cells"]) if last else 0,
                        cells_planned=cells_planned, spending=SPENDING)


def headline_verdict(looks: Sequence[LookDoc]) -> Verdict:
    """The last look's headline once it stopped; imprecise before (a run that ended without its last look)."""
    v = looks[-1].get("verdict") if looks else None
    return v if v in ("reproduced", "inconsistent", "imprecise") else "imprecise"  # type: ignore[return-value]


def note(info: UntilDecided) -> str:
    return (f"{FLAG_TEXT}: {info.stopped}; {info.cells_used} of {info.cells_planned} planned cells of the new run "
            f"used. The verdict is the group-sequential rule's at its looks (reproduce-looks/, "
            f"{info.spending}-type spending; docs/reproduce.md), not the fixed-sample rule on the cells used; the new "
            "run's own A/B intervals in its report are fixed-sample ones on a run that stopped where its data chose")
