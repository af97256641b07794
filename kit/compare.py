"""`kit compare A B`: what differs between two bundles' setups, and how their figures moved (B / A).

This compares *runs* (the same experiment on two machines, two days, two kit versions); the A/B
verdicts between *arms* inside one run are in each bundle's report. Figures come from each
bundle's summary.json (read as a typed ``Summary``), which `kit verify` recomputes from the records.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

from pydantic import ValidationError

from kit.errors import BundleError
from kit.files.read import MAX_FILE_BYTES
from kit.files.summary import ArmLevel, Summary
from kit.plumbing.files import read_bounded, sha256_file

FigureGet = Callable[[ArmLevel], float | None]

FIGURES: list[tuple[str, FigureGet, bool]] = [  # (label, figure of an arm_levels entry, higher is better)
    ("out tok/s", lambda f: f.throughput_tok_s, True),
    ("req/s", lambda f: f.throughput_req_s, True),
    ("TTFT p50 ms", lambda f: f.ttft_ms.p50, False),
    ("TPOT p50 ms", lambda f: f.tpot_ms.p50, False),
    ("ITL p50 ms", lambda f: f.itl_ms.p50, False),
    ("E2E p50 ms", lambda f: f.e2e_ms.p50, False),
    ("experts/step", lambda f: f.server.unique_experts_per_step if f.server else None, False),
]

SETUP: list[tuple[str, str, str]] = [  # (label, file, dotted path)
    ("manifest sha256", "provenance", "manifest"),
    ("kit version", "run.json", "kit_version"),
    ("trust unverified", "run.json", "trust.signers"),  # run.json's claim; kit compare checks no signature
    ("flags", "run.json", "flags"),
    ("git commit", "environment.json", "git.commit"),
    ("host CPU", "environment.json", "host.cpu.model"),
    ("cores", "environment.json", "host.cpu.usable_cores"),
    ("kernel", "environment.json", "host.kernel.release"),
    ("python", "environment.json", "host.python.version"),
    ("packages", "environment.json", "host.packages"),
    ("GPU driver", "environment.json", "gpus.driver_version"),
    ("GPUs", "environment.json", "gpus.gpus"),
    ("runtime", "environment.json", "runtime"),
    ("images", "images.json", ""),
]


class SetupRow(TypedDict):
    what: str
    a: object
    b: object
    same: bool


class FigureRow(TypedDict):
    arm: str
    level: int
    figure: str
    a: float | None
    b: float | None
    ratio_b_over_a: float | None
    higher_is_better: bool
    client_bound: bool


class BundleComparison(TypedDict):
    a: str
    b: str
    setup: list[SetupRow]
    figures: list[FigureRow]


def _load(root: Path, name: str) -> object:
    p = root / name
    if not p.exists() and not p.is_symlink():
        return None
    try:
        if p.is_symlink():
            raise OSError("is a symbolic link; a bundle holds only regular files")
        return json.loads(read_bounded(p, MAX_FILE_BYTES))
    except RecursionError:
        raise BundleError(f"{p}: JSON nested too deeply", hint=f"run `kit verify {root}`") from None
    except (OSError, ValueError) as e:  # not JSON, not UTF-8, too large, a directory or special file
        raise BundleError(f"{p}: not a readable JSON file ({e})", hint=f"run `kit verify {root}`") from None


def _summary(root: Path) -> Summary:
    doc = _load(root, "summary.json")
    try:
        return Summary.model_validate(doc)
    except ValidationError as e:
        raise BundleError(f"{root / 'summary.json'}: not a kit summary ({e.error_count()} problems: "
                          f"{e.errors()[0]['loc']}: {e.errors()[0]['msg']})", hint=f"run `kit report {root}`") from None


def _get(obj: object, dotted: str) -> object:
    for part in [p for p in dotted.split(".") if p]:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _manifest_digest(root: Path) -> str | None:
    p = root / "manifest.yaml"
    return sha256_file(p)[0] if p.exists() else None


def _setup(root: Path) -> dict[str, object]:
    files = {name: _load(root, name) for name in ("run.json", "environment.json", "images.json")}
    out: dict[str, object] = {}
    for label, name, dotted in SETUP:
        out[label] = _manifest_digest(root) if name == "provenance" else _get(files[name], dotted)
    return out


def _figures(summary: Summary) -> dict[tuple[str, int], ArmLevel]:
    return {(entry.arm, entry.level): entry for entry in summary.arm_levels}


def _ratio(x: float | None, y: float | None) -> float | None:
    return y / x if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x else None


def compare_bundles(a: Path, b: Path) -> BundleComparison:
    for root in (a, b):
        if not (root / "run.json").exists():
            raise BundleError(f"{root} is not a kit bundle (no run.json)")
        if not (root / "summary.json").exists():
            raise BundleError(f"{root} has no summary.json", hint=f"run `kit report {root}`")
    sa, sb = _setup(a), _setup(b)
    setup: list[SetupRow] = [{"what": k, "a": sa[k], "b": sb[k], "same": sa[k] == sb[k]} for k in sa]
    fa, fb = _figures(_summary(a)), _figures(_summary(b))
    rows: list[FigureRow] = []
    for key in sorted(set(fa) | set(fb)):
        va, vb = fa.get(key), fb.get(key)
        for label, get, higher in FIGURES:
            x = get(va) if va else None
            y = get(vb) if vb else None
            if x is None and y is None:
                continue
            rows.append({
                "arm": key[0], "level": key[1], "figure": label, "a": x, "b": y, "ratio_b_over_a": _ratio(x, y),
                "higher_is_better": higher,
                "client_bound": bool((va is not None and va.client_bound) or (vb is not None and vb.client_bound)),
            })
    return {"a": str(a), "b": str(b), "setup": setup, "figures": rows}


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    text = json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)
    return text if len(text) <= 60 else text[:57] + "..."


def render_comparison(result: BundleComparison) -> list[str]:
    lines = [f"A: {result['a']}", f"B: {result['b']}",
             "NOT VERIFIED: kit compare reads what each bundle's files claim (trust included) and checks no "
             "signature; run `kit verify` on each bundle first", "", "setup:"]
    for s in result["setup"]:
        mark = "same" if s["same"] else "DIFFERS"
        lines.append(f"  {s['what']:<16} {mark:<8} " + (_fmt(s["a"]) if s["same"] else f"A={_fmt(s['a'])}  "
                                                          f"B={_fmt(s['b'])}"))
    lines += ["", f"{'arm':<12}{'c':>6}  {'figure':<14}{'A':>12}{'B':>12}{'B/A':>9}"]
    for r in result["figures"]:
        ratio = f"{r['ratio_b_over_a']:.3f}" if r["ratio_b_over_a"] is not None else "-"
        flag = "  client-bound" if r["client_bound"] else ""
        lines.append(f"{r['arm']:<12}{r['level']:>6}  {r['figure']:<14}{_fmt(r['a']):>12}{_fmt(r['b']):>12}"
                     f"{ratio:>9}{flag}")
    lines.append("")
    lines.append("B/A is a plain ratio of the two runs' pooled figures, without a confidence interval; the "
                 "A/B verdicts between arms are in each bundle's report.md.")
    return lines
