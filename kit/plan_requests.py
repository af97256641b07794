"""Repeats and requests per cell from a pilot (`kit plan --pilot BUNDLE --target-effect E`): for requests per
cell x1, x2, x4 (and fewer where the pilot says the requests make most of the variance), the repeats per arm each
level needs for the target at 80 % power at the pilot's SD bound, and the time the whole run would take. The
maths: ``kit.stats.pilot`` (σ² = σ_b² + w / n) and ``kit.stats.power``; docs/statistics.md, "Plans from a pilot".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kit.stats import power
from kit.stats.pilot import PilotLevel, sd_at_requests

if TYPE_CHECKING:
    from kit.manifest import Manifest
    from kit.plan import LevelPower
    from kit.plan_timing import Estimate

FACTORS = (0.5, 1.0, 2.0, 4.0)  # requests per cell, relative to the manifest's


@dataclass(frozen=True)
class Option:
    factor: float  # requests per cell relative to the manifest's
    requests: tuple[int, ...]  # per level
    repeats: int | None  # per arm, for every level's target power (None: beyond power.MAX_REPEATS)
    minutes: float | None  # the whole run's estimated time (None: out of reach)
    sds: tuple[float, ...]  # per level: the SD planned with at these requests


def options(m: Manifest, est: Estimate, levels: Sequence[LevelPower], pilot: Mapping[int, PilotLevel],
            effect: float, tail: float, method: str, even: bool) -> tuple[Option, ...]:
    """The repeats x requests options for ``effect`` (log); empty without a pilot's requests model (an assumed
    CV, or a rate as the primary: throughput, goodput)."""
    if not pilot or any(lv.within is None for lv in pilot.values()):
        return ()
    cells = len(est_cells(m))
    start = est.assumed_start_s
    load = (est.seconds - est.untimed_seconds) / cells - start  # one cell's load time at the manifest's requests
    out = []
    for f in FACTORS:
        sds: list[float] = []
        reqs: list[int] = []
        need: int | None = 0
        for lp in levels:
            pl = pilot.get(lp.concurrency) or next(iter(pilot.values()))
            n = max(2, round(m.load.requests_at(lp.concurrency) * f))
            sd = sd_at_requests(pl, lp.log_sd, n)
            k = power.repeats_needed(effect, sd, tail, even=even, method=method)
            sds.append(sd)
            reqs.append(n)
            need = None if k is None or need is None else max(need, k)
        minutes = None if need is None else (need * len(m.arms) * (start + f * load) + est.untimed_seconds) / 60
        out.append(Option(f, tuple(reqs), need, minutes, tuple(sds)))
    return tuple(out)


def est_cells(m: Manifest) -> range:
    return range(m.design.repeats * len(m.arms))


def best(opts: Sequence[Option]) -> Option | None:
    """The quickest option that reaches the target (None: none does)."""
    ok = [o for o in opts if o.minutes is not None]
    return min(ok, key=lambda o: (o.minutes or math.inf, o.factor)) if ok else None


def option_lines(opts: Sequence[Option]) -> list[str]:
    """The options as `kit plan` prints them."""
    if not opts:
        return []
    out = ["    repeats x requests per cell for that change (the pilot's between-cell and within-cell variance; "
           "each row: every level at 80 % power):"]
    pick = best(opts)
    for o in opts:
        reqs = "/".join(str(r) for r in o.requests)
        what = (f"{o.repeats} repeats per arm, about {o.minutes:.0f} min" if o.repeats is not None and
                o.minutes is not None else f"more than {power.MAX_REPEATS} repeats per arm")
        mark = "  <- quickest" if o is pick else ""
        out.append(f"      x{o.factor:g} requests ({reqs} per level): {what}{mark}")
    if pick is not None:
        out.append(f"    expected time to a decision: about {pick.minutes:.0f} min ({pick.repeats} repeats per arm, "
                   f"x{pick.factor:g} requests per cell)")
    return out
