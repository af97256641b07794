"""Prints OEA's effect (experts/step, TPOT) per level from the two bundles run.sh made (demo and demo-text)."""

import glob
import json
from pathlib import Path

for n in ("demo", "demo-text"):
    (b,) = glob.glob(f"/tmp/wl/meas/out-{n}/*/")
    s = json.loads(Path(b, "summary.json").read_text())
    print(f"== {n}: {b}")
    al = {(a["arm"], a["level"]): a for a in s["arm_levels"]}
    for lv in sorted({k[1] for k in al}):
        base, oea = al[("baseline", lv)], al[("oea", lv)]
        eb, eo = base["server"]["unique_experts_per_step"], oea["server"]["unique_experts_per_step"]
        print(f"  c={lv:<3} experts/step baseline {eb:.2f} oea {eo:.2f} (ratio {eo/eb:.3f});"
              f" TPOT mean ms baseline {base['tpot_ms']['mean']:.3f} oea {oea['tpot_ms']['mean']:.3f}")
    for c in s["comparisons"]:
        if c["metric"] == "tpot_mean_ms":
            print(f"  c={c['level']:<3} TPOT ratio {c['ratio']:.3f} CI {c['ratio_ci']} {c['status']}")
