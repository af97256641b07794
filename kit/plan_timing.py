"""How long a run takes: the estimate `kit plan` prints, assumed (a time per token and per server start) or, with
``--pilot BUNDLE``, measured in the pilot's cells.

Assumed: each level runs in waves of ``concurrency`` requests of output_tokens x ITL; each cell adds a server start.
On this project's 2-core machine that put the demo at 14.1 min against 5.3 measured (a review): the defaults are a
GPU server's (20 ms a token, 5 s a start), not a tiny CPU engine's.

Measured (``measured_timing``): from each ok cell of the pilot, per arm and level, one wave's seconds per output
token (the level's wall time over its waves of ``concurrency`` requests, over the tokens a request returned:
``summary.json``'s output tokens over its ok requests), and per cell what is not its recorded load: its own time
less its levels (the server's start and stop, the warm-ups, whose first requests pay for compiles and caches, the
gates), and the median time between one cell's end and the next one's start (a resume hours later is no gap a run
of the plan has).
Means of the cells, not medians: the run's time is the sum of its cells', and a busy machine's slow cells are part of
it (the demo's pilot: medians gave 3.8 min for a run of 4.6; this rule 4.1, its longest gaps between cells being
re-measured client-bound cells, which a plan does not have). A level or arm the pilot did not run falls back to the
assumption.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from kit.errors import BundleError
from kit.files.cell import CellFile
from kit.files.plan import PlanFile
from kit.files.read import read_file
from kit.files.summary import Summary
from kit.plumbing.clock import parse_utc

if TYPE_CHECKING:
    from kit.manifest import Manifest
    from kit.plan import Plan

MAX_ITL_MS = 60_000.0  # kit plan --itl-ms: a minute per token (the most an estimate assumes)
REQUEST_S = 0.05  # assumed: a request's time beside its tokens


@dataclass(frozen=True)
class Timing:
    """What a pilot measured of time (see the module doc)."""

    cells: int  # the ok cells measured
    cell_overhead_s: float  # per cell, beside its recorded load: server start and stop, warm-ups, gates, kit
    token_wave_s: dict[tuple[str, int], float] = field(default_factory=dict)  # (arm, concurrency) -> s per token

    def wave_s(self, arm: str, concurrency: int, tokens: int) -> float | None:
        """One wave's seconds at ``concurrency`` for requests of ``tokens`` output tokens (this arm's, else the
        other arms' at that concurrency); None where the pilot ran no such level."""
        per = self.token_wave_s.get((arm, concurrency))
        if per is None:
            same = [v for (_, c), v in self.token_wave_s.items() if c == concurrency]
            per = statistics.fmean(same) if same else None
        return None if per is None else per * tokens


@dataclass(frozen=True)
class Estimate:
    requests: int
    warmup_requests: int
    output_tokens: int
    seconds: float  # the whole run: the timed cells, then the untimed passes
    assumed_itl_ms: float
    assumed_start_s: float  # per cell beside its load: assumed, or the pilot's measured overhead
    server_starts: int  # one per cell, plus one per arm for the manifest's expert_pass
    untimed_seconds: float = 0.0  # of ``seconds``: the expert_pass servers (start and requests), after the cells
    measured: str | None = None  # with a pilot: what was measured there, and what was still assumed

    def basis(self) -> str:
        """What the estimate rests on, for `kit plan`'s line."""
        if self.measured is not None:
            return self.measured
        return f"assuming {self.assumed_itl_ms:g} ms/token and {self.assumed_start_s:g} s per server start"


def estimate_run(m: Manifest, plan: Plan, *, itl_ms: float = 20.0, start_s: float | None = None,
                 timing: Timing | None = None) -> Estimate:
    """A rough duration: each level runs in waves of `concurrency` requests (an open-loop level no faster than its
    schedule, a time-limited one for its duration), timed as ``timing`` measured them where it did, else at
    output_tokens x ``itl_ms``; each cell adds the pilot's measured overhead, else ``start_s``."""
    tokens = m.load.output_tokens
    assumed_wave = tokens * itl_ms / 1000.0 + REQUEST_S
    start = start_s if start_s is not None else (5.0 if m.runtime == "process" else 120.0)
    if timing is not None:
        start = timing.cell_overhead_s
    seconds = 0.0
    assumed_levels: set[int] = set()
    for cell in plan.cells:
        seconds += start
        for lv in plan.levels:
            measured = timing.wave_s(cell.arm, lv.concurrency, tokens) if timing is not None else None
            if measured is None:
                assumed_levels.add(lv.concurrency)
            wave = assumed_wave if measured is None else measured
            level_s = math.ceil(lv.requests / lv.concurrency) * wave
            if m.load.arrival.duration_s is not None:  # a time-limited level lasts its duration and a last request
                level_s = m.load.arrival.duration_s + wave
            elif lv.rate is not None:  # open loop: no faster than its schedule, then the last request
                level_s = max(level_s, lv.requests / lv.rate + wave)
            warm_s = 0.0 if timing is not None else math.ceil(lv.warmup / lv.concurrency) * wave  # measured: overhead
            seconds += warm_s + level_s
    passes = len(m.arms) if m.expert_pass is not None else 0  # kit.experiment.expert_pass: one server per arm
    untimed = 0.0
    if (p := m.expert_pass) is not None:
        untimed = passes * (start + math.ceil(p.requests / p.concurrency) * (p.output_tokens * itl_ms / 1000.0
                                                                              + REQUEST_S))
    measured_text = None
    if timing is not None:
        rest = (f"; c={', '.join(str(c) for c in sorted(assumed_levels))} not in the pilot: {itl_ms:g} ms/token "
                "assumed there") if assumed_levels else ""
        measured_text = (f"timed as the pilot's {timing.cells} cells ran: {start:.1f} s per cell beside its recorded "
                         "load (start, warm-up, stop, gates), "
                         f"each level's waves at the pilot's seconds per token{rest}")
    n = len(plan.cells)
    req = sum(lv.requests for lv in plan.levels)
    warm = sum(lv.warmup for lv in plan.levels)
    return Estimate(requests=req * n, warmup_requests=warm * n, output_tokens=req * n * tokens,
                    seconds=seconds + untimed, assumed_itl_ms=itl_ms, assumed_start_s=start,
                    server_starts=n + passes, untimed_seconds=untimed, measured=measured_text)


def measured_timing(root: Path) -> Timing | None:
    """What the pilot bundle at ``root`` (verified by the caller) measured of time; None where no ok cell says."""
    plan = read_file(root, "plan.json", PlanFile)
    requests = {lv.concurrency: lv.requests for lv in plan.levels}
    summary = read_file(root, "summary.json", Summary) if (root / "summary.json").is_file() else None
    tokens = {(a.arm, a.level): a.output_tokens / a.ok for a in summary.arm_levels if a.ok} if summary else {}
    per_token: dict[tuple[str, int], list[float]] = {}
    spans: list[tuple[int, datetime, datetime, float]] = []  # (index, started, finished, load s) of each ok cell
    for planned in plan.cells:
        try:
            cell = read_file(root, f"cells/{planned.id}/cell.json", CellFile)
        except BundleError:  # never ran, or not to be read: no time from it
            continue
        if cell.status != "ok":
            continue
        load = 0.0
        for key, outcome in cell.levels.items():
            if not key.isdigit():  # not a level kit writes: no time from it
                continue
            c = int(key)
            n = requests.get(c, 0)
            t = tokens.get((cell.arm, c))
            load += outcome.wall_s
            if n and t:
                per_token.setdefault((cell.arm, c), []).append(outcome.wall_s / math.ceil(n / c) / t)
        if (began := parse_utc(cell.started)) is not None and (ended := parse_utc(cell.finished)) is not None:
            spans.append((cell.index, began, ended, load))
    spans.sort()
    own = [(end - start).total_seconds() - load for _, start, end, load in spans]
    # between one cell's end and the next one's start (the gates, kit): the median, since a pilot that was
    # resumed hours later, or a cell redone after the others, puts a gap there that no run of the plan has
    gaps = [(b[1] - a[2]).total_seconds() for a, b in itertools.pairwise(spans) if b[0] == a[0] + 1]
    gaps = [g for g in gaps if g >= 0]
    if not per_token or not own:
        return None
    between = statistics.median(gaps) if gaps else 0.0
    return Timing(cells=len(spans), cell_overhead_s=max(0.0, statistics.fmean(own) + between),
                  token_wave_s={k: statistics.fmean(v) for k, v in per_token.items()})
