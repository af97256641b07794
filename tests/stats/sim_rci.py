"""An independent simulation of the repeated confidence intervals of a sequential run (``kit.stats.looks.repeated_ci``):
its own generator (normal log cell statistics, numpy), its own Welch statistics (numpy, scipy's t), a run that
stops at the first look whose Welch p crosses kit's boundary (``nominal_levels``) or at the maximum; at the stopping
look the naive fixed-sample 95 % interval and kit's repeated interval, and whether the true effect lies in each;
"simultaneous": the true effect inside kit's repeated interval at every look of the run, the stop's and after it
included (what Jennison & Turnbull's intervals promise).

``python -m tests.stats.sim_sequential --write-table docs/statistics.md`` rewrites this table too (make seq-table).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats as sps

from kit.stats.looks import repeated_ci
from kit.stats.model import Welch
from kit.stats.sequential import nominal_levels
from tests.stats.doc_tables import replace_between

BEGIN = "<!-- sim-rci:begin (python -m tests.stats.sim_sequential --write-table docs/statistics.md) -->"
END = "<!-- sim-rci:end -->"


@dataclass(frozen=True)
class Coverage:
    naive: float  # the fixed-sample 95 % interval at the stopping look covers the truth
    repeated: float  # kit's repeated interval at the stopping look covers it
    simultaneous: float  # kit's repeated intervals at every look cover it
    looks: float  # mean looks to the stop
    power: float  # the share of runs whose test crossed a boundary


def simulate(spending: str, repeats: int, effect: float, sd: float, runs: int, seed: int = 0,
             alpha: float = 0.05) -> Coverage:
    """One comparison (log effect ``effect``, between-cell SD ``sd``), a look after every 2 repeats per arm."""
    rng = np.random.default_rng(seed)
    looks = repeats // 2
    nominal = nominal_levels([(k + 1) / looks for k in range(looks)], alpha, spending, final=True)
    arm = rng.normal(effect, sd, (runs, repeats))
    base = rng.normal(0.0, sd, (runs, repeats))
    stopped = np.zeros(runs, dtype=bool)
    naive = np.zeros(runs, dtype=bool)
    at_stop = np.zeros(runs, dtype=bool)
    every = np.ones(runs, dtype=bool)
    stop_look = np.zeros(runs)
    crossed = np.zeros(runs, dtype=bool)
    for k in range(looks):
        n = 2 * (k + 1)
        x, y = arm[:, :n], base[:, :n]
        est = x.mean(axis=1) - y.mean(axis=1)
        va, vb = x.var(axis=1, ddof=1) / n, y.var(axis=1, ddof=1) / n
        se = np.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (n - 1) + vb**2 / (n - 1))
        p = 2 * sps.t.sf(np.abs(est) / se, df)
        cover = np.empty(runs, dtype=bool)
        for i in range(runs):  # kit's interval, run by run
            ci = repeated_ci(Welch(float(est[i]), float(se[i]), float(df[i]), float(p[i]), n, n), nominal[k])
            cover[i] = ci is None or ci[0] <= math.exp(effect) <= ci[1]
        every &= cover
        now = ~stopped & ((p <= nominal[k]) | (k == looks - 1))
        crossed |= now & (p <= nominal[k])
        half = sps.t.ppf(1 - alpha / 2, df) * se
        naive[now] = (np.abs(est - effect) <= half)[now]
        at_stop[now] = cover[now]
        stop_look[now] = k + 1
        stopped |= now
    return Coverage(float(naive.mean()), float(at_stop.mean()), float(every.mean()), float(stop_look.mean()),
                    float(crossed.mean()))


def table_rows(runs: int = 20000) -> list[str]:
    rows = ["| spending | max repeats/arm | between-cell SD | true effect | power | mean looks | naive 95 % interval "
            "at the stop | repeated interval at the stop | repeated intervals at every look |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for spending in ("obrien-fleming", "pocock"):
        for effect in (0.0, 0.05, 0.10, 0.15):
            c = simulate(spending, 16, effect, 0.10, runs, seed=5)
            rows.append(f"| {spending} | 16 | 0.10 | ×{math.exp(effect):.3f} | {100 * c.power:.0f} % | {c.looks:.2f} | "
                        f"{100 * c.naive:.1f} % | {100 * c.repeated:.1f} % | {100 * c.simultaneous:.1f} % |")
    return rows


def write_table(path: Path) -> None:
    replace_between(path, BEGIN, END, table_rows())


if __name__ == "__main__":
    print("\n".join(table_rows()))
