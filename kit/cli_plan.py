"""`kit plan` (registered on ``kit.cli.main``): parse, load the manifest, check model.path here, make the plan,
its estimate and power, render what each arm's server touches on the host; touches no Docker, no GPU."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from kit.cli_options import echo, echo_json, json_option
from kit.manifest import load_manifest, on_this_host, refuse_placeholders
from kit.plan import make_plan, parse_fraction, power_lines, power_plan
from kit.plan_timing import MAX_ITL_MS
from kit.server_spec import exposure_lines, host_exposure
from kit.slurm import render_allocation


def _itl_ms(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """--itl-ms: a positive, finite number of milliseconds (nan, inf, 0 and below made estimates of 'nan min' or
    negative minutes)."""
    if not (math.isfinite(value) and 0 < value <= MAX_ITL_MS):
        raise click.BadParameter(f"{value:g} is not a time per token: give milliseconds above 0 and at most "
                                 f"{MAX_ITL_MS:g} (a minute), e.g. --itl-ms 20")
    return value


@click.command()
@click.argument("manifest", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--allow-unpinned", is_flag=True, help="Plan even if an image base is not pinned by digest.")
@click.option("--itl-ms", type=float, default=20.0, show_default=True, callback=_itl_ms,
              help="Assumed inter-token latency for the time estimate.")
@click.option("--cv", metavar="CV", help="Assumed between-cell CV of the primary metric: 5% or 0.05 (default: "
              "kit's measured values, 10% with GPUs, 30% without).")
@click.option("--pilot", type=click.Path(path_type=Path), metavar="BUNDLE",
              help="Measure the between-cell CV in an earlier bundle, a directory or its `kit archive` .tar.gz (its "
              "files must match its signed provenance); with --target-effect also plans requests per cell.")
@click.option("--target-effect", metavar="EFFECT",
              help="Also print the repeats per arm that detect this change (e.g. 5% or 0.05) with 80% power.")
@json_option
def plan(manifest: Path, allow_unpinned: bool, itl_ms: float, cv: str | None, pilot: Path | None,
         target_effect: str | None, as_json: bool) -> None:
    """Print what each arm's server touches on the host (command, image, mounts, IPC, network, published
    ports, env, pass_env names, GPUs, privileges), the ordered cells, gates, an estimate, and the smallest
    effect on the primary metric the design detects with 80% power per level; touches no Docker, no GPU."""
    lm = load_manifest(manifest, allow_unpinned=allow_unpinned)
    refuse_placeholders(lm)
    m, notes = lm.manifest, on_this_host(lm)
    p = make_plan(m)
    pp = power_plan(m, cv=parse_fraction(cv, "--cv"), pilot=pilot,
                    target_effect=parse_fraction(target_effect, "--target-effect"), itl_ms=itl_ms)
    est = pp.estimate  # timed as a pilot's cells ran, where one is given
    assert est is not None
    if as_json:
        echo_json({"manifest": str(manifest), "plan": p.as_dict(), "estimate": est.__dict__,
                    "runtime": m.runtime, "host": host_exposure(m), "server": m.server.model_dump(),
                    "model": m.model.model_dump(), "hardware": m.hardware.model_dump(),
                    "arms": [a.model_dump() for a in m.arms], "gates": m.gates.model_dump(), "power": pp.as_dict(),
                    "slurm": render_allocation(m), "template": m.template, "notes": notes})
        return
    _render_plan(lm, p, est, echo)
    echo("".join(f"  ! {n}\n" for n in notes), nl=False)
    echo("\n".join(power_lines(pp)))
    echo("\n".join(render_allocation(m)))


def _render_plan(lm: Any, p: Any, est: Any, out: Callable[[str], None]) -> None:
    m = lm.manifest
    out(f"experiment {m.name}: {len(m.arms)} arms x {m.design.repeats} repeats = {len(p.cells)} cells "
        f"({p.order}), runtime {m.runtime}" + (" - a template: it plans, but never runs" * m.template))
    for view in host_exposure(m):
        for line in exposure_lines(view):
            out(line)
    gpus = m.hardware.gpus
    gates = [f"ports {', '.join(str(x) for x in [m.server.port, *m.server.extra_ports, *m.gates.ports])} free on "
             f"{m.server.host}", "no leftover kit containers or servers"]
    if gpus:
        gates.insert(0, f"{gpus} GPU(s) clean: NVML v2 used <= {m.gates.gpu_memory_threshold_mib} MiB, "
                        f"no processes (deadline {m.gates.gpu_deadline_s:g} s)")
    if m.runtime == "slurm":
        gates = [f"on each of the {m.hardware.nodes} nodes: " + "; ".join(gates[:-1]) + f" (first node); rank 0's "
                 f"port {m.ranks.dist_init_port} free on the first node; no process of a kit rank left", gates[-1]]
    out("  gates before every start and after every stop: " + "; ".join(gates))
    out("  levels: " + ", ".join(f"c={lv.concurrency} ({lv.requests} req + {lv.warmup} warm-up)" for lv in p.levels))
    out("  cells in run order:")
    for c in p.cells:
        out(f"    {c.index + 1:>3}. {c.id}")
    if (xp := m.expert_pass) is not None:  # kit.experiment.expert_pass
        out(f"  then the expert pass, untimed: one more server per arm ({', '.join(a.name for a in m.arms)}) with "
            f"{' '.join(xp.server_args)}, {xp.requests} requests at c={xp.concurrency} ({xp.prompt_tokens} words in, "
            f"{xp.output_tokens} tokens out), gates before and after each")
    mins = est.seconds / 60
    passes = est.server_starts - len(p.cells)
    split = f" ({len(p.cells)} cells + {passes} expert pass)" if passes else ""
    out(f"  estimate: {est.requests} recorded requests ({est.warmup_requests} warm-up), {est.output_tokens} output "
        f"tokens, {est.server_starts} server starts{split}, about {mins:.1f} min ({est.basis()})")
