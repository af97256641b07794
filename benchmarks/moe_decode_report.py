"""Tables for ``moe_decode_step.py``: OEA / baseline ratios per cell and the paper's MoE-layer comparison."""

from __future__ import annotations

from typing import Any

from gpu_timing import table

PAPER = {"batch": 16, "k0": 3, "baseline_us": 175.7, "oea_us": 106.8, "T_baseline": 48.8, "T_oea": 25.1, "gpu": "1x H100"}  # fmt: skip


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OEA / baseline per (part, impl, batch, OEA arm), with the IQRs' overlap as a rough noise flag."""
    base = {(r["part"], r["impl"], r["batch"]): r for r in rows if r["arm"] == "baseline"}
    out = []
    for r in rows:
        b = base.get((r["part"], r["impl"], r["batch"]))
        if r["arm"] == "baseline" or b is None or not b["us"] or r["us"] is None:
            continue
        out.append({
            "part": r["part"], "impl": r["impl"], "batch": r["batch"], "arm": r["arm"],
            "baseline_us": b["us"], "oea_us": r["us"], "ratio": round(r["us"] / b["us"], 3),
            "change_pct": round(100 * (r["us"] / b["us"] - 1), 1), "T_baseline": b["T"], "T_oea": r["T"],
            "iqr_overlap": not (r["q3_us"] < b["q1_us"] or b["q3_us"] < r["q1_us"]),
            "mode": b["mode"] if b["mode"] == r["mode"] else f"{b['mode']} / {r['mode']}",
        })  # fmt: skip
    return out


def pivot(ratio_rows: list[dict[str, Any]]) -> str:
    """OEA / baseline with rows (part, impl, arm) and one column per batch size."""
    batches = sorted({r["batch"] for r in ratio_rows})
    keys = list(dict.fromkeys((r["part"], r["impl"], r["arm"]) for r in ratio_rows))
    cells = {(r["part"], r["impl"], r["arm"], r["batch"]): r for r in ratio_rows}
    shown = []
    for part, impl, arm in keys:
        row: dict[str, Any] = {"what": f"{part} {impl} {arm}"}
        for b in batches:
            c = cells.get((part, impl, arm, b))
            row[str(b)] = None if c is None else f"{c['ratio']:.3f}" + ("" if c["mode"].startswith("graph") else " e")
        shown.append(row)
    return table(shown, [("what", "OEA / baseline"), *((str(b), f"batch {b}") for b in batches)])


def render(result: dict[str, Any]) -> str:
    moe = [r for r in result["rows"] if r["part"] == "moe" and r["us"] is not None]
    failed = [r for r in result["rows"] if r["us"] is None]
    copy = f", copy {result['copy_tbps']} TB/s measured" if result.get("copy_tbps") else ""
    parts = [
        f"## MoE layer ({result['shape']}, k0={result['k0']}, floor = touched experts' weights at "
        f"{result['hbm_tbps']} TB/s{copy})",
        table(moe, [("impl", "impl"), ("batch", "batch"), ("arm", "arm"), ("us", "us/layer"), ("q1_us", "q1"),
                    ("q3_us", "q3"), ("T", "T"), ("weight_MB", "MB read"), ("floor_us", "floor us"),
                    ("roofline_frac", "of floor"), ("copy_frac", "of copy"), ("mode", "mode")]),
        "## Ratio OEA / baseline (' e': timed without a CUDA graph)",
        pivot(result["ratios"]),
        "## OEA / baseline",
        table(result["ratios"], [("part", "part"), ("impl", "impl"), ("batch", "batch"), ("arm", "arm"),
                                 ("baseline_us", "base us"), ("oea_us", "oea us"), ("ratio", "ratio"),
                                 ("change_pct", "change %"), ("T_baseline", "T base"), ("T_oea", "T oea"),
                                 ("iqr_overlap", "IQRs overlap"), ("mode", "mode")]),
    ]  # fmt: skip
    paper = [r for r in result["ratios"] if r["part"] == "moe" and r["batch"] == PAPER["batch"]]
    if paper and result["k0"] == PAPER["k0"]:
        p = PAPER
        parts.append(f"Paper (k0=3, batch 16, {p['gpu']}): {p['baseline_us']} -> {p['oea_us']} us "
                     f"({100 * (p['oea_us'] / p['baseline_us'] - 1):.0f} %), T {p['T_baseline']} -> {p['T_oea']}; "
                     "here: " + "; ".join(f"{r['impl']} {r['baseline_us']} -> {r['oea_us']} us ({r['change_pct']} %),"
                                          f" T {r['T_baseline']} -> {r['T_oea']}" for r in paper))  # fmt: skip
    if failed:
        parts.append("Failed: " + "; ".join(f"{r['part']} {r['impl']} {r['batch']} {r['arm']}: {r['mode']}"
                                            for r in failed))  # fmt: skip
    if result["skipped"]:
        parts.append(f"Skipped (--max-seconds): {', '.join(result['skipped'])}")
    return "\n\n".join(parts)
