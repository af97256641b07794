"""OEA's effect on real text against word prompts, from the two H200 bundles' summary.json (this folder).

Per manifest and level: the cell TPOT means (kit's cell statistic), OEA/baseline as the ratio of geometric means,
and the ratio of the two ratios (real text / words) with a Welch interval on the log scale (four groups of cells,
Welch-Satterthwaite degrees of freedom). Also the prompt tokens the server counted and the running batch the
telemetry saw. Run: python3 benchmarks/results/h200-realtext-2026-12-03/compare.py
"""

import json
import math
from pathlib import Path

from scipy import stats

HERE = Path(__file__).parent


def cells(name: str) -> tuple[dict[tuple[str, str], list[float]], dict[tuple[str, str], float]]:
    s = json.loads((HERE / f"{name}.summary.json").read_text())
    tpot: dict[tuple[str, str], list[float]] = {}
    running: dict[tuple[str, str], float] = {}
    for c in s["cells"]:
        for lv, d in c["levels"].items():
            tpot.setdefault((c["arm"], lv), []).append(d["tpot_ms"]["mean"])
            running[(c["arm"], lv)] = max(running.get((c["arm"], lv), 0.0), d["telemetry"]["running_max"])
    return tpot, running


def mean_var(xs: list[float]) -> tuple[float, float, int]:
    logs = [math.log(x) for x in xs]
    m = sum(logs) / len(logs)
    return m, sum((v - m) ** 2 for v in logs) / (len(logs) - 1), len(logs)


def log_ratio(tpot: dict[tuple[str, str], list[float]], lv: str) -> tuple[float, list[tuple[float, int]]]:
    mo, vo, no = mean_var(tpot[("oea", lv)])
    mb, vb, nb = mean_var(tpot[("baseline", lv)])
    return mo - mb, [(vo, no), (vb, nb)]


for lv in ("1", "4"):
    parts = {}
    for name in ("h200-realtext", "h200-words"):
        tpot, running = cells(name)
        d, groups = log_ratio(tpot, lv)
        parts[name] = (d, groups)
        cell_means = {arm: [round(x, 1) for x in tpot[(arm, lv)]] for arm in ("baseline", "oea")}
        print(f"c={lv} {name:14} TPOT cell means ms {cell_means}; OEA/baseline {math.exp(d):.3f}; "
              f"running max {running[('baseline', lv)]:.0f}/{running[('oea', lv)]:.0f}")
    d = parts["h200-realtext"][0] - parts["h200-words"][0]
    groups = parts["h200-realtext"][1] + parts["h200-words"][1]
    se2 = sum(v / n for v, n in groups)
    df = se2 ** 2 / sum((v / n) ** 2 / (n - 1) for v, n in groups)
    t = stats.t.ppf(0.975, df)
    lo, hi = math.exp(d - t * math.sqrt(se2)), math.exp(d + t * math.sqrt(se2))
    print(f"c={lv} ratio of ratios (real text / words) {math.exp(d):.3f}, 95 % CI [{lo:.3f}, {hi:.3f}] (df {df:.1f})")

