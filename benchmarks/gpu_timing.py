"""Timing helpers shared by the GPU micro-benchmarks (``moe_decode_step.py``, ``oea_hook_overhead.py``).

``measure`` times several variants of one piece of work side by side: on CUDA each variant is captured
into one CUDA graph of ``reps`` back-to-back calls (falling back to plain launches when capture fails,
and saying why), warmed up, then the variants' graphs are replayed round-robin, ``samples`` times each,
every replay between two CUDA events; a sample is the replay's time divided by ``reps``. Interleaving
keeps slow drifts (clocks, temperature, a neighbour) out of the differences. On the CPU (smoke tests)
the same loop runs with ``time.perf_counter``. Results carry the median and the interquartile range.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

Fn = Callable[[], object]


def log(msg: str) -> None:
    print(msg, flush=True)


def quartiles(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    if len(ordered) == 1:
        return {"median": ordered[0], "q1": ordered[0], "q3": ordered[0]}
    q1, med, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    return {"median": med, "q1": q1, "q3": q3}


class Budget:
    """A wall-clock budget: parts check ``left()`` and skip the rest once it is spent."""

    def __init__(self, seconds: float) -> None:
        self.start = time.monotonic()
        self.seconds = seconds

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)

    def spent(self) -> bool:
        return self.left() <= 0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def capture(fn: Fn, reps: int, warmup: int) -> tuple[Any, str]:
    """A CUDA graph of ``reps`` calls of ``fn`` (warmed up on a side stream first), or (None, why not)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(max(warmup, 1)):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(reps):
                fn()
    except Exception as exc:  # noqa: BLE001 (any capture failure means: time it without a graph)
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160] if str(exc) else ''}"
        del graph
        for _ in range(2):  # a failed capture can leave its error for the next CUDA call to report once
            try:
                torch.cuda.synchronize()
                break
            except Exception:  # noqa: BLE001
                pass
        return None, why
    torch.cuda.synchronize()
    return graph, ""


def call_time_s(fn: Fn, device: torch.device, tries: int = 3) -> float:
    """Seconds for one plain call of ``fn`` (the minimum of a few, after one warm-up call)."""
    fn()
    sync(device)
    best = math.inf
    for _ in range(tries):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def measure(
    fns: dict[str, Fn],
    device: torch.device,
    *,
    reps: int,
    samples: int,
    warmup: int = 3,
    graph: bool = True,
    no_graph_reason: str = "",
) -> dict[str, dict[str, Any]]:
    """Per variant: median/q1/q3 microseconds per call, samples, reps and the mode used ('graph' or 'eager')."""
    runners: dict[str, Fn] = {}
    modes: dict[str, str] = {}
    graphs: list[Any] = []
    for name, fn in fns.items():
        if device.type == "cuda" and graph:
            g, why = capture(fn, reps, warmup)
            if g is not None:
                graphs.append(g)
                runners[name], modes[name] = g.replay, "graph"
                g.replay()
                continue
            modes[name] = f"eager (capture failed: {why})"
        else:
            modes[name] = "eager" + (f" ({no_graph_reason})" if no_graph_reason and device.type == "cuda" else "")
            for _ in range(warmup):
                fn()

        def loop(fn: Fn = fn) -> None:
            for _ in range(reps):
                fn()

        runners[name] = loop
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in fns}
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(samples):
        for name, run in runners.items():
            if device.type == "cuda":
                start.record()
                run()
                end.record()
                end.synchronize()
                times[name].append(start.elapsed_time(end) * 1000.0 / reps)
            else:
                t0 = time.perf_counter()
                run()
                times[name].append((time.perf_counter() - t0) * 1e6 / reps)
    del graphs
    out: dict[str, dict[str, Any]] = {}
    for name, ts in times.items():
        q = quartiles(ts)
        out[name] = {
            "median_us": round(q["median"], 3),
            "q1_us": round(q["q1"], 3),
            "q3_us": round(q["q3"], 3),
            "samples": len(ts),
            "reps": reps,
            "mode": modes[name],
        }
    return out


def plan(call_s: float, *, arms: int, cell_seconds: float, min_sample_ms: float, max_samples: int) -> tuple[int, int]:
    """(reps per sample, samples) so one sample lasts >= min_sample_ms and the cell fits cell_seconds."""
    reps = max(1, math.ceil(min_sample_ms / 1000.0 / max(call_s, 1e-7)))
    reps = min(reps, 200)
    samples = int(cell_seconds / max(arms * reps * call_s, 1e-7))
    return reps, max(5, min(samples, max_samples))


def copy_tbps(device: torch.device, gib: float = 4.0, reps: int = 10) -> float | None:
    """Device-to-device copy bandwidth in TB/s (bytes read + written), the practical HBM ceiling; None on CPU."""
    if device.type != "cuda":
        return None
    src = torch.empty(int(gib * 2**30), dtype=torch.uint8, device=device).random_(0, 255)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    del src, dst
    torch.cuda.empty_cache()
    return round(2 * gib * 2**30 / statistics.median(times) / 1e12, 3)


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__}
    for name in ("transformers", "triton"):
        try:
            env[name] = __import__(name).__version__
        except ImportError:
            env[name] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["device"] = props.name
        env["sm_count"] = props.multi_processor_count
        env["memory_gb"] = round(props.total_memory / 2**30, 1)
    else:
        env["device"] = "cpu"
    env["host_cpus"] = os.cpu_count()
    return env


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> str:
    """A Markdown table of ``rows`` with (key, header) ``columns``; floats get 1-3 decimals."""

    def cell(value: Any) -> str:
        if value is None:
            return "-"
        if isinstance(value, float):
            return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
        return str(value)

    head = "| " + " | ".join(h for _, h in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(cell(r.get(k)) for k, _ in columns) + " |" for r in rows]
    return "\n".join([head, rule, *body])


def write_json(out_dir: Path | None, name: str, payload: dict[str, Any]) -> None:
    if out_dir is None:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / name).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def write_results(out_dir: Path | None, stem: str, payload: dict[str, Any], report: str) -> None:
    """A benchmark's final results: ``<stem>.json`` and the printed report as ``<stem>.md`` in ``out_dir``."""
    write_json(out_dir, f"{stem}.json", payload)
    if out_dir is not None:
        (out_dir / f"{stem}.md").write_text(report + "\n", encoding="utf-8")
