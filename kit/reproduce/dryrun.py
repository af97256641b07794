"""`kit reproduce --dry-run`: what would be rebuilt and run, and for how long, touching nothing (the source is
verified in a temp copy, the manifest's signature checked under the policy, nothing built, started or written)."""

from __future__ import annotations

from pathlib import Path

from kit.errors import KitError
from kit.experiment.inputs import RunInputs
from kit.files.cell import CellFile
from kit.files.read import read_file
from kit.images.context import context_subject, image_contexts
from kit.plan import make_plan
from kit.plan_timing import estimate_run
from kit.plumbing.clock import parse_utc
from kit.reproduce.identity import images_of
from kit.reproduce.source import Source


def _seconds(start: str | None, end: str | None) -> float | None:
    a, b = parse_utc(start), parse_utc(end)
    return None if a is None or b is None else (b - a).total_seconds()


def _minutes(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 60 else f"{s:.0f} s"


def dry_run_lines(src: Source, inputs: RunInputs, out_dir: Path, resume: Path | None,
                  until_decided: bool = False) -> list[str]:
    m = inputs.lm.manifest
    plan = make_plan(m)
    out = [f"source: {src.ref.path} (run {src.ref.run_id} of {src.ref.experiment}, provenance sha256 "
           f"{src.ref.provenance_sha256[:16]}...)", *[f"  {line}" for line in src.lines]]
    trust = inputs.trust
    if trust.signed:
        who = ", ".join(f"{p} ({fp})" for p, fp, _ in trust.signers)
        out.append(f"manifest: sha256 {src.ref.manifest_sha256[:16]}..., approved under your policy by {who}")
    else:
        out.append(f"manifest: sha256 {src.ref.manifest_sha256[:16]}..., NOT approved under your policy "
                   f"(--allow-unsigned): {trust.note}")
    out.append(f"would re-run: {m.name}, runtime {m.runtime}, the source's plan: {len(plan.cells)} cells "
               f"({plan.order}), levels " + ", ".join(f"c={lv.concurrency} ({lv.requests} req + {lv.warmup} warm-up)"
                                                     for lv in plan.levels))
    out.append("  cells in run order: " + ", ".join(c.id for c in plan.cells))
    if m.runtime == "docker":
        recorded = images_of(src.root)
        contexts = image_contexts(inputs.lm)
        for arm in m.arms:
            if arm.image is None:
                continue
            digest = contexts.get(context_subject(arm.name, arm.image.context), ("?", {}))[0]
            base = arm.image.base or f"the image of arm {arm.image.base_arm}"
            rec = recorded.get(arm.name)
            out.append(f"would rebuild {arm.name}: {arm.image.context} (context sha256 {digest[:16]}..., signed) "
                       f"FROM {base}, build args {arm.image.build_args or '{}'}; the source recorded image "
                       f"{rec.image_id if rec and rec.image_id else '(none)'}")
    else:
        out.append("would rebuild: nothing (process runtime: each arm's server command is compared instead)")
    where = f"resume {resume}" if resume else f"a new bundle under {out_dir}/"
    out.append(f"into: {where}, then judged against the source: {m.analysis.primary}, margin "
               f"{100 * m.analysis.reproduce.margin:.3g} % of each effect the original found "
               f"(analysis.reproduce.margin), ±{100 * m.analysis.reproduce_margin:.3g} % where it found none "
               f"(analysis.reproduce_margin), confidence {m.analysis.confidence:g}"
               + ("; the arms' shifts judged (same_hardware)" if m.analysis.reproduce.same_hardware else ""))
    if until_decided:
        out.append(f"--until-decided: a look at the verdict after each block of 2 repeats per arm (at most "
                   f"{m.design.repeats // 2} looks, reproduce-looks/); the run stops at the first look that decides "
                   "it, so it may use fewer cells than the estimate below")
    measured = _measured_tpot_ms(src)
    est = estimate_run(m, plan) if measured is None else estimate_run(m, plan, itl_ms=measured)
    took = _seconds(src.run.started, src.run.finished)
    at = ("the original's measured TPOT, the median over its arms and levels: " if measured is not None else "")
    head = f"kit's estimate at {at}{est.assumed_itl_ms:.3g} ms/token"
    model = f"{head}: {_minutes(est.seconds)}"
    cells = _cell_seconds(src.root)
    if cells:  # the same plan on the same kind of machine takes what the original's cells took
        per = sum(cells) / len(cells)
        out.append(f"estimate: about {_minutes(per * len(plan.cells))} ({len(plan.cells)} cells at the original's "
                   f"{_minutes(per)} per cell, mean of {len(cells)}; {model})"
                   + (f"; the original run took {_minutes(took)} (run.json started → finished)" if took else ""))
        return out
    out.append(f"estimate: about {_minutes(est.seconds)} ({head})"
               + (f"; the original took {_minutes(took)} (run.json started → finished)" if took else ""))
    return out


MAX_CELLS_READ = 4096  # cell.json files read for the estimate (a plan has fewer)


def _cell_seconds(root: Path) -> list[float]:
    """Each ok cell's wall time in the source (cell.json started → finished); unreadable ones are left out."""
    out: list[float] = []
    for path in sorted(root.glob("cells/*/cell.json"))[:MAX_CELLS_READ]:
        try:
            cell = read_file(root, path.relative_to(root).as_posix(), CellFile)
        except KitError:
            continue
        if cell.status == "ok" and (s := _seconds(cell.started, cell.finished)) is not None and 0 <= s < 1e7:
            out.append(s)
    return out


def _measured_tpot_ms(src: Source) -> float | None:
    """The median of the source's arm-level TPOT means (ms per output token), when it measured any."""
    got = sorted(t for a in src.summary.arm_levels if (t := a.tpot_ms.mean) is not None and 0 < t < 1e6)
    return got[len(got) // 2] if got else None
